package io.gradspark.kernels

import java.nio.{ByteBuffer, ByteOrder}
import java.nio.file.{Files, Paths}

import org.apache.hadoop.fs.Path
import org.apache.spark.api.java.JavaRDD
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Dataset, Row, SparkSession}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.{BinaryType, StructField, StructType}
import org.apache.spark.storage.StorageLevel

/**
 * What python (py4j) calls: only strings, numbers, booleans, Datasets and byte arrays.
 * Results go back through a file python names: a returned byte[] costs a
 * ~40 ms delayed ACK on loopback (see _call_for_doubles in engine/jvm.py).
 */
object PythonEntry {
  /** What python checks before calling (gradspark.engine.jvm.KERNELS_VERSION): bump it
   *  whenever a signature python calls changes. 2: results go to a file. 3: the weights
   *  come from a file too; JvmBlocks.compact. 4: JvmBlocks.localize. 5: sparse statistics.
   *  6: JvmBlocks.taggedBinaryRdd; blockify learns the vectors' size (statistics sets
   *  numFeatures). */
  val Version = "6"

  /** Validated blocks of df, cached MEMORY_AND_DISK (not yet computed: call statistics). */
  def blockify(
      df: Dataset[Row], featuresCol: String, labelCol: String, weightCol: String,
      labelDomain: String, blockSize: Int, checkpoint: Boolean): JvmBlocks = {
    val weight = if (weightCol == null || weightCol.isEmpty) null else weightCol
    val columns = Seq(col(featuresCol), col(labelCol).cast("double")) ++
      (if (weight != null) Seq(col(weight).cast("double")) else Nil)
    val rows = df.select(columns: _*).rdd
    val blocks = rows.mapPartitionsWithIndex(
      new BlockifyFunction(blockSize, labelDomain, featuresCol, labelCol, weight))
    blocks.persist(StorageLevel.MEMORY_AND_DISK)
    blocks.setName(s"gradspark JVM training blocks ($featuresCol, $labelCol)")
    if (checkpoint) blocks.checkpoint()
    new JvmBlocks(df.sparkSession, blocks, -1, featuresCol = featuresCol)
  }

  def toBytes(a: Array[Double]): Array[Byte] = {
    val buf = ByteBuffer.allocate(a.length * 8).order(ByteOrder.LITTLE_ENDIAN)
    buf.asDoubleBuffer().put(a)
    buf.array()
  }

  /** Write a as little-endian float64 to path (see the note on results above). */
  def writeDoubles(a: Array[Double], path: String): Unit =
    Files.write(Paths.get(path), toBytes(a))

  /** Little-endian float64 from a file python wrote: a py4j byte[] travels base64-encoded,
   *  which cost ~0.15 s per step for 4 million weights. */
  def readDoubles(path: String): Array[Double] = fromBytes(Files.readAllBytes(Paths.get(path)))

  /** Little-endian int32 from a file python wrote. */
  def readInts(path: String): Array[Int] = {
    val b = Files.readAllBytes(Paths.get(path))
    val out = new Array[Int](b.length / 4)
    ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out)
    out
  }

  def fromBytes(b: Array[Byte]): Array[Double] = {
    val out = new Array[Double](b.length / 8)
    ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asDoubleBuffer().get(out)
    out
  }

  /** How many distinct JVM processes ran df's partitions through a class of this jar. */
  def executorPids(df: Dataset[Row]): Int =
    df.rdd.mapPartitions(new ProcessIdFunction).distinct().count().toInt

  /** Switch the dense kernels between netlib BLAS and plain loops (benchmarks). */
  def setUseBlas(on: Boolean): Unit = Kernels.useBlas = on
}

/** Driver-side handle on the cached blocks; never serialized.
 *
 * `parent` and `featureMap`: what a compacted copy (see `compact`) still holds
 * and releases with it.
 */
final class JvmBlocks(
    spark: SparkSession, val rdd: RDD[Block], private var width: Int,
    parent: JvmBlocks = null, featureMap: Broadcast[Array[Int]] = null,
    featuresCol: String = "features") {

  /** The vectors' size; blockify's blocks learn it in the statistics pass (-1 before). */
  def numFeatures: Int = width

  def numPartitions: Int = rdd.getNumPartitions

  def rddName: String = rdd.name

  /** One tree-aggregated pass (this materializes the cache); flat float64 to resultPath,
   *  in the Statistics layout or, for CSR blocks, the SparseStatistics one: python
   *  densifies it (a dense answer is 2 d doubles, 268 MB through a file at 2^24). */
  def statistics(trackClasses: Boolean, depth: Int, resultPath: String): Unit = {
    val (size, _, stats) = OrderedAggregate.of(
      rdd.mapPartitionsWithIndex(new SizedPartitionStatisticsFunction(trackClasses)),
      new MergeSizedStatisticsFunction(featuresCol), SizedStatistics.Empty, depth)
    width = math.max(size, 0) // 0: no rows at all
    PythonEntry.writeDoubles(stats, resultPath)
  }

  /** The partitions on the features each holds (see LocalPartition), or null. */
  private var local: RDD[LocalPartition] = null

  /** The RDD a step reads: the partition-local one once localize has run. */
  def cachedRddId: Int = if (local != null) local.id else rdd.id

  /** Renumbers each partition's blocks to the features it holds, caches and computes
   *  them, and unpersists these blocks (kept as lineage: a lost partition is recomputed
   *  from them, or from their checkpoint). Later steps run on the local partitions.
   *  Returns how many features each partition holds. */
  def localize(): Array[Int] = {
    if (local == null) {
      local = rdd.mapPartitions(new LocalizeFunction, preservesPartitioning = true)
      local.persist(StorageLevel.MEMORY_AND_DISK)
      local.setName(rdd.name + " (partition-local features)")
    }
    val held = rdd.sparkContext.runJob(local, new HeldFeaturesFunction)
    rdd.unpersist(blocking = false)
    held
  }

  /** One Spark job; reads the weights from paramsPath and writes flat float64 xtg, gsum,
   *  d_aux, loss_sum, weight_sum, count to resultPath. */
  def gradientSums(
      loss: String, numOutputs: Int, numAux: Int, constants: Array[Byte], paramsPath: String,
      fraction: Double, seed: Long, step: Int, depth: Int, resultPath: String): Unit = {
    val weights = StepWeights(rdd.sparkContext, PythonEntry.readDoubles(paramsPath))
    val lossConstants = PythonEntry.fromBytes(constants)
    try {
      val sums = if (local != null) {
        val fn = new LocalGradientFunction(weights, loss, lossConstants, numFeatures,
          numOutputs, numAux, fraction, seed, step)
        SparseSums.toDense(OrderedAggregate.of(local.mapPartitionsWithIndex(fn),
          new MergeSparseSumsFunction(numOutputs), SparseSums.Empty, depth),
          numFeatures, numOutputs)
      } else {
        val fn = new GradientFunction(weights, loss, lossConstants, numFeatures,
          numOutputs, numAux, fraction, seed, step)
        OrderedAggregate(rdd.mapPartitionsWithIndex(fn), new SumArraysFunction, depth)
      }
      PythonEntry.writeDoubles(sums, resultPath)
    } finally {
      weights.release()
    }
  }

  /** The blocks as a DataFrame of one binary column (see EncodeBlockFunction). */
  def binaryFrame(): DataFrame = {
    val schema = StructType(Seq(StructField("block", BinaryType, nullable = false)))
    spark.createDataFrame(rdd.map(new BlockToRowFunction), schema)
  }

  /** The blocks for long-running Python workers: each one's partition index (int64)
   *  then its encoding (TaggedBlockBytesFunction), in at most `workers` partitions
   *  (coalesced here, in the JVM, so that one Python worker per task reads them).
   *  A pyspark RDD with a NoOpSerializer gets each block as soon as it is encoded;
   *  binaryFrame's Arrow batches wait for a whole partition's blocks. */
  def taggedBinaryRdd(workers: Int): JavaRDD[Array[Byte]] = {
    val tagged = rdd.mapPartitionsWithIndex(new TaggedBlockBytesFunction)
    (if (rdd.getNumPartitions > workers) {
      tagged.coalesce(workers, shuffle = false, Some(new ContiguousCoalescer))
    } else tagged).toJavaRDD()
  }

  /** The blocks with only the features listed (ascending int32 in activePath), renumbered
   *  0, 1, ...: cached and computed now, after which these blocks are unpersisted.
   *
   *  A feature that never varies gets a zero coefficient (MLlib's rule), so wide
   *  sparse data trains the same model on the features that occur: every
   *  per-step array then has the size of those, not of the hashing space. The
   *  map stays broadcast until release, for recomputing a lost partition (from
   *  these blocks' lineage or checkpoint). */
  def compact(activePath: String): JvmBlocks = {
    val active = PythonEntry.readInts(activePath)
    val map = Array.fill(numFeatures)(-1)
    var j = 0
    while (j < active.length) { map(active(j)) = j; j += 1 }
    val sc = rdd.sparkContext
    val bc = sc.broadcast(map)
    val compacted = rdd.map(new CompactBlockFunction(bc, active.length))
    compacted.persist(StorageLevel.MEMORY_AND_DISK)
    compacted.setName(rdd.name + s" (${active.length} of $numFeatures features)")
    sc.runJob(compacted, new CountBlocksFunction)
    rdd.unpersist(blocking = false)
    new JvmBlocks(spark, compacted, active.length, this, bc)
  }

  def release(): Unit = {
    if (local != null) local.unpersist(blocking = false)
    rdd.unpersist(blocking = false)
    rdd.getCheckpointFile.foreach { file =>
      val path = new Path(file)
      path.getFileSystem(rdd.sparkContext.hadoopConfiguration).delete(path, true)
    }
    if (featureMap != null) featureMap.destroy()
    if (parent != null) parent.release()
  }
}

final class CountBlocksFunction extends (Iterator[Block] => Int) with Serializable {
  def apply(blocks: Iterator[Block]): Int = blocks.size
}

final class ProcessIdFunction extends (Iterator[Row] => Iterator[Long]) with Serializable {
  def apply(rows: Iterator[Row]): Iterator[Long] = Iterator.single(ProcessHandle.current().pid())
}
