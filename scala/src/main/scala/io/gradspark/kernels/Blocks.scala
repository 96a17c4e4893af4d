package io.gradspark.kernels

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.ml.linalg.{DenseVector, SparseVector, Vector}
import org.apache.spark.sql.Row

/** A contiguous run of rows of one partition: dense row-major (n x d) or CSR.
 *
 * Lives only in executors and in the block cache; it never travels back to
 * the driver (which may have loaded this class through its own class loader).
 */
final class Block(
    val numRows: Int,
    val numCols: Int,
    val dense: Array[Double], // n * d row-major, or null when CSR
    val indptr: Array[Int], // CSR (n + 1), or null when dense
    val indices: Array[Int],
    val values: Array[Double],
    val labels: Array[Double],
    val weights: Array[Double],
    val firstRow: Long) extends Serializable {

  def isSparse: Boolean = dense == null

  /** The same rows on the features j with map(j) >= 0, renumbered map(j) (ascending
   *  with j, so CSR rows stay sorted). */
  def compact(map: Array[Int], numActive: Int): Block = {
    if (isSparse) {
      var nnz = 0
      var p = 0
      while (p < indices.length) { if (map(indices(p)) >= 0) nnz += 1; p += 1 }
      val ptr = new Array[Int](numRows + 1)
      val idx = new Array[Int](nnz)
      val vals = new Array[Double](nnz)
      var q = 0
      var i = 0
      while (i < numRows) {
        p = indptr(i)
        while (p < indptr(i + 1)) {
          val c = map(indices(p))
          if (c >= 0) { idx(q) = c; vals(q) = values(p); q += 1 }
          p += 1
        }
        ptr(i + 1) = q
        i += 1
      }
      new Block(numRows, numActive, null, ptr, idx, vals, labels, weights, firstRow)
    } else {
      val x = new Array[Double](numRows * numActive)
      var i = 0
      while (i < numRows) {
        var j = 0
        while (j < numCols) {
          val c = map(j)
          if (c >= 0) x(i * numActive + c) = dense(i * numCols + j)
          j += 1
        }
        i += 1
      }
      new Block(numRows, numActive, x, null, null, null, labels, weights, firstRow)
    }
  }

  /** The rows where keep(i); same layout as this block. */
  def select(keep: Array[Boolean]): Block = {
    val n = keep.count(identity)
    val d = numCols
    val y = new Array[Double](n)
    val w = new Array[Double](n)
    var r = 0
    var i = 0
    if (!isSparse) {
      val x = new Array[Double](n * d)
      while (i < numRows) {
        if (keep(i)) {
          System.arraycopy(dense, i * d, x, r * d, d)
          y(r) = labels(i); w(r) = weights(i); r += 1
        }
        i += 1
      }
      new Block(n, d, x, null, null, null, y, w, firstRow)
    } else {
      var nnz = 0
      while (i < numRows) { if (keep(i)) nnz += indptr(i + 1) - indptr(i); i += 1 }
      val ptr = new Array[Int](n + 1)
      val idx = new Array[Int](nnz)
      val vals = new Array[Double](nnz)
      i = 0
      while (i < numRows) {
        if (keep(i)) {
          val len = indptr(i + 1) - indptr(i)
          System.arraycopy(indices, indptr(i), idx, ptr(r), len)
          System.arraycopy(values, indptr(i), vals, ptr(r), len)
          ptr(r + 1) = ptr(r) + len
          y(r) = labels(i); w(r) = weights(i); r += 1
        }
        i += 1
      }
      new Block(n, d, null, ptr, idx, vals, y, w, firstRow)
    }
  }
}

object Blocks {
  val Mark = "gradspark-data-error"
  // Below this density a block with sparse rows is kept CSR (as gradspark/data/blocks.py).
  val SparseDensity = 0.5

  /** The exception python's raising_data_errors() turns into InvalidDataError(message). */
  def dataError(message: String): Throwable =
    new IllegalArgumentException(s"$Mark[$message]$Mark")

  /** A float as Python's str() writes it, close enough for messages. */
  def pyFloat(x: Double): String =
    if (x.isNaN) "nan"
    else if (x.isPosInfinity) "inf"
    else if (x.isNegInfinity) "-inf"
    else if (x == math.rint(x) && math.abs(x) < 1e16) {
      if (x == 0.0 && 1.0 / x < 0) "-0.0" else s"${x.toLong}.0"
    } else java.lang.Double.toString(x).replace("E", "e")

  def pyVector(v: Vector): String = v match {
    case s: SparseVector =>
      s"(${s.size},[${s.indices.mkString(",")}],[${s.values.map(pyFloat).mkString(",")}])"
    case other => other.toArray.map(pyFloat).mkString("[", ",", "]")
  }

  def quoted(name: String): String = s"'$name'"
}

/** Rows (features, label, [weight]) of one partition -> validated blocks.
 *
 * The vectors' size is the size of the partition's first vector: the statistics
 * pass then checks that every partition found the same (SizedStatistics), so no
 * job has to read the first row before this one (70-110 ms a fit). */
final class BlockifyFunction(
    blockSize: Int,
    labelDomain: String,
    featuresCol: String,
    labelCol: String,
    weightCol: String) // null: no weight column
  extends ((Int, Iterator[Row]) => Iterator[Block]) with Serializable {

  import Blocks._

  def apply(partitionIndex: Int, rows: Iterator[Row]): Iterator[Block] = new Iterator[Block] {
    private val partition = partitionIndex
    private var start = 0L
    private var width = -1 // the size of this partition's vectors: its first one's
    def hasNext: Boolean = rows.hasNext
    def next(): Block = {
      val vectors = new ArrayBuffer[Vector](math.min(blockSize, 4096))
      val labels = new ArrayBuffer[java.lang.Double](math.min(blockSize, 4096))
      val weights = if (weightCol != null) new ArrayBuffer[java.lang.Double]() else null
      while (vectors.length < blockSize && rows.hasNext) {
        val row = rows.next()
        vectors += (if (row.isNullAt(0)) null else row.getAs[Vector](0))
        labels += (if (row.isNullAt(1)) null else java.lang.Double.valueOf(row.getDouble(1)))
        if (weights != null) {
          weights += (if (row.isNullAt(2)) null else java.lang.Double.valueOf(row.getDouble(2)))
        }
      }
      if (width < 0) width = partitionWidth(vectors(0), partition)
      val block = makeBlock(vectors, labels, weights, partition, start, width)
      start += vectors.length
      block
    }
  }

  /** The size of a partition's first vector (row 0): every vector of it must have it. */
  private def partitionWidth(first: Vector, partition: Int): Int = {
    if (first == null) {
      throw dataError(s"features column ${quoted(featuresCol)} is null at partition $partition, row 0")
    }
    if (first.size == 0) {
      throw dataError(
        s"features column ${quoted(featuresCol)} holds an empty vector at partition $partition, row 0")
    }
    first.size
  }

  private def makeBlock(
      vectors: ArrayBuffer[Vector],
      labelsIn: ArrayBuffer[java.lang.Double],
      weightsIn: ArrayBuffer[java.lang.Double],
      partition: Int,
      start: Long,
      d: Int): Block = {
    val n = vectors.length
    def where(k: Int): String = s"partition $partition, row ${start + k}"

    var k = 0
    while (k < n) {
      val v = vectors(k)
      if (v == null) throw dataError(s"features column ${quoted(featuresCol)} is null at ${where(k)}")
      if (v.size != d) {
        throw dataError(
          s"features column ${quoted(featuresCol)} has a vector of size ${v.size} at " +
            s"${where(k)}, but row 0 of partition $partition has size $d; all feature vectors " +
            "must have the same size")
      }
      k += 1
    }
    for ((name, values) <- Seq((labelCol, labelsIn), (weightCol, weightsIn)) if values != null) {
      val bad = values.indexWhere(_ == null)
      if (bad >= 0) throw dataError(s"column ${quoted(name)} is null at ${where(bad)}")
    }
    val y = new Array[Double](n)
    val w = new Array[Double](n)
    k = 0
    while (k < n) {
      y(k) = labelsIn(k).doubleValue()
      w(k) = if (weightsIn == null) 1.0 else weightsIn(k).doubleValue()
      k += 1
    }

    val block = stack(vectors, y, w, start, d)
    val badRow = firstNonFiniteRow(block)
    if (badRow >= 0) {
      throw dataError(
        s"features column ${quoted(featuresCol)} contains NaN or infinite values " +
          s"(first at ${where(badRow)}: ${pyVector(vectors(badRow))})")
    }
    checkLabels(y, where)
    if (weightsIn != null) {
      val bad = w.indexWhere(x => x.isNaN || x.isInfinite || x < 0)
      if (bad >= 0) {
        throw dataError(
          s"weight column ${quoted(weightCol)} must be finite and >= 0, got ${pyFloat(w(bad))} " +
            s"at ${where(bad)}")
      }
    }
    block
  }

  private def stack(vectors: ArrayBuffer[Vector], y: Array[Double], w: Array[Double],
      start: Long, d: Int): Block = {
    val n = vectors.length
    if (vectors.forall(_.isInstanceOf[DenseVector])) {
      val x = new Array[Double](n * d)
      var i = 0
      while (i < n) {
        System.arraycopy(vectors(i).asInstanceOf[DenseVector].values, 0, x, i * d, d)
        i += 1
      }
      return new Block(n, d, x, null, null, null, y, w, start)
    }
    // CSR: sparse rows as they are (explicit zeros kept), dense rows by their nonzeros.
    var nnz = 0L
    vectors.foreach {
      case s: SparseVector => nnz += s.indices.length
      case v => nnz += v.toArray.count(_ != 0.0)
    }
    if (nnz.toDouble >= SparseDensity * n.toDouble * d.toDouble) {
      val x = new Array[Double](n * d)
      var i = 0
      while (i < n) {
        vectors(i) match {
          case s: SparseVector =>
            var p = 0
            while (p < s.indices.length) { x(i * d + s.indices(p)) += s.values(p); p += 1 }
          case v => System.arraycopy(v.toArray, 0, x, i * d, d)
        }
        i += 1
      }
      return new Block(n, d, x, null, null, null, y, w, start)
    }
    val ptr = new Array[Int](n + 1)
    val idx = new Array[Int](nnz.toInt)
    val vals = new Array[Double](nnz.toInt)
    var i = 0
    while (i < n) {
      var p = ptr(i)
      vectors(i) match {
        case s: SparseVector =>
          System.arraycopy(s.indices, 0, idx, p, s.indices.length)
          System.arraycopy(s.values, 0, vals, p, s.values.length)
          p += s.indices.length
        case v =>
          val a = v.toArray
          var j = 0
          while (j < d) { if (a(j) != 0.0) { idx(p) = j; vals(p) = a(j); p += 1 }; j += 1 }
      }
      ptr(i + 1) = p
      i += 1
    }
    new Block(n, d, null, ptr, idx, vals, y, w, start)
  }

  private def firstNonFiniteRow(b: Block): Int = {
    def bad(x: Double) = x.isNaN || x.isInfinite
    if (b.isSparse) {
      val p = b.values.indexWhere(bad)
      if (p < 0) -1
      else {
        var i = 0
        while (b.indptr(i + 1) <= p) i += 1
        i
      }
    } else {
      val p = b.dense.indexWhere(bad)
      if (p < 0) -1 else p / b.numCols
    }
  }

  private def checkLabels(y: Array[Double], where: Int => String): Unit = {
    val nonFinite = y.indexWhere(x => x.isNaN || x.isInfinite)
    if (nonFinite >= 0) {
      throw dataError(s"label column ${quoted(labelCol)} is ${pyFloat(y(nonFinite))} at ${where(nonFinite)}")
    }
    val (bad, expected) = labelDomain match {
      case "real" => return
      case "binary" => (y.indexWhere(x => x != 0.0 && x != 1.0), "0 or 1 (binary classification)")
      case _ =>
        (y.indexWhere(x => x < 0 || x != math.floor(x)),
          "a class index 0, 1, 2, ... (non-negative integer)")
    }
    if (bad >= 0) {
      throw dataError(
        s"label column ${quoted(labelCol)} must be $expected, got ${pyFloat(y(bad))} at ${where(bad)}")
    }
  }
}

/** A block as bytes (little-endian), for python's gradspark.engine.jvm decoder.
 *
 * Header: 5 int64 (kind 0 dense / 1 CSR, n, d, nnz, firstRow); labels (n f64),
 * weights (n f64); then dense (n*d f64) or indptr ((n+1) int64), indices
 * (nnz int32), values (nnz f64).
 */
final class EncodeBlockFunction extends (Block => Array[Byte]) with Serializable {
  def apply(b: Block): Array[Byte] = encode(b, -1L)

  /** The encoding, after one int64 `partition` when that is not negative. */
  def encode(b: Block, partition: Long): Array[Byte] = {
    val n = b.numRows
    val nnz = if (b.isSparse) b.values.length else 0
    val tag = if (partition >= 0) 8 else 0
    val size = tag + 5 * 8 + 2 * n * 8 +
      (if (b.isSparse) (n + 1) * 8 + nnz * 4 + nnz * 8 else n * b.numCols * 8)
    val buf = java.nio.ByteBuffer.allocate(size).order(java.nio.ByteOrder.LITTLE_ENDIAN)
    if (tag > 0) buf.putLong(partition)
    buf.putLong(if (b.isSparse) 1L else 0L).putLong(n).putLong(b.numCols).putLong(nnz)
      .putLong(b.firstRow)
    // Bulk puts through typed views (which keep the buffer's byte order): an element
    // at a time through `foreach(buf.putDouble)` boxed every value, and the resident
    // workers' load waited on this encoding.
    putDoubles(buf, b.labels, n)
    putDoubles(buf, b.weights, n)
    if (b.isSparse) {
      val pointers = buf.asLongBuffer()
      var i = 0
      while (i <= n) { pointers.put(b.indptr(i).toLong); i += 1 }
      buf.position(buf.position() + 8 * (n + 1))
      buf.asIntBuffer().put(b.indices, 0, nnz)
      buf.position(buf.position() + 4 * nnz)
      putDoubles(buf, b.values, nnz)
    } else {
      buf.asDoubleBuffer().put(b.dense)
    }
    buf.array()
  }

  private def putDoubles(buf: java.nio.ByteBuffer, values: Array[Double], count: Int): Unit = {
    buf.asDoubleBuffer().put(values, 0, count)
    buf.position(buf.position() + 8 * count)
  }
}

final class CompactBlockFunction(map: org.apache.spark.broadcast.Broadcast[Array[Int]],
    numActive: Int) extends (Block => Block) with Serializable {
  def apply(b: Block): Block = b.compact(map.value, numActive)
}

/** Each block as its partition index (int64) and its encoding (EncodeBlockFunction). */
final class TaggedBlockBytesFunction
    extends ((Int, Iterator[Block]) => Iterator[Array[Byte]]) with Serializable {
  private val encode = new EncodeBlockFunction
  def apply(partition: Int, blocks: Iterator[Block]): Iterator[Array[Byte]] =
    blocks.map(b => encode.encode(b, partition.toLong))
}

/** Coalesces partitions into contiguous runs (group i: partitions i n / k until
 *  (i + 1) n / k), whatever their locations. Spark's default grouping follows the
 *  cached blocks' locations, which it may not know yet in a session's first fit: the
 *  same blocks went to workers as 0 1 | 2 3 there and 0 2 | 1 3 later, each worker's
 *  sums were added in another order, and a resumed fit was no longer bit-identical
 *  to one that never stopped. A worker reads its blocks once per fit. */
final class ContiguousCoalescer extends org.apache.spark.rdd.PartitionCoalescer
    with Serializable {
  def coalesce(maxPartitions: Int, parent: org.apache.spark.rdd.RDD[_])
      : Array[org.apache.spark.rdd.PartitionGroup] = {
    val n = parent.partitions.length
    val k = math.max(1, math.min(maxPartitions, n))
    Array.tabulate(k) { i =>
      val group = new org.apache.spark.rdd.PartitionGroup(None)
      var p = (i.toLong * n / k).toInt
      val end = ((i + 1).toLong * n / k).toInt
      while (p < end) { group.partitions += parent.partitions(p); p += 1 }
      group
    }
  }
}

final class BlockToRowFunction extends (Block => Row) with Serializable {
  private val encode = new EncodeBlockFunction
  def apply(b: Block): Row = Row(encode(b))
}
