package io.gradspark.kernels

import org.apache.spark.{HashPartitioner, TaskContext}
import org.apache.spark.rdd.RDD

/**
 * treeAggregate whose additions happen in an order fixed by partition indices.
 *
 * Spark's treeAggregate merges partial results in the order tasks finish and
 * shuffle blocks arrive, so floating-point sums differ in the last bits from
 * run to run. Here each level groups partials by `index / scale`, sorts every
 * group by index before merging, and the driver merges the last level in
 * index order: the same data and partitioning give the same bits, which is
 * what bit-identical resumes need. Same fan-in rule as treeAggregate.
 *
 * Jobs run through `runJob` with named functions rather than `collect()`:
 * collect's lambda makes the closure cleaner parse RDD.class from its jar on
 * every job (about 3 ms of driver CPU per step in a JFR profile), and with
 * one level the partials come back in partition order with no extra RDD.
 */
object OrderedAggregate {
  type Merge = (Array[Double], Array[Double]) => Array[Double]

  /** `parts` yields partial arrays (empty = nothing); `merge` treats empty as zero. */
  def apply(parts: RDD[Array[Double]], merge: Merge, depth: Int): Array[Double] = {
    val sc = parts.sparkContext
    var n = parts.getNumPartitions
    val scale = math.max(math.ceil(math.pow(n.toDouble, 1.0 / math.max(depth, 1))).toInt, 2)
    if (n <= scale + math.ceil(n.toDouble / scale)) {
      // runJob's results are in partition order.
      return sc.runJob(parts, new MergeTaskPartials(merge)).foldLeft(Array.emptyDoubleArray)(merge)
    }
    var level: RDD[(Int, Array[Double])] = parts.mapPartitionsWithIndex(new MergePartition(merge))
    while (n > scale + math.ceil(n.toDouble / scale)) {
      n = math.ceil(n.toDouble / scale).toInt
      level = level.map(new ToGroup(scale)).groupByKey(new HashPartitioner(n))
        .map(new MergeGroup(merge))
    }
    sc.runJob(level, new CollectPartition).flatten.sortBy(_._1).map(_._2)
      .foldLeft(Array.emptyDoubleArray)(merge)
  }
}

final class MergeTaskPartials(merge: OrderedAggregate.Merge)
  extends ((TaskContext, Iterator[Array[Double]]) => Array[Double]) with Serializable {
  def apply(context: TaskContext, parts: Iterator[Array[Double]]): Array[Double] =
    parts.foldLeft(Array.emptyDoubleArray)(merge)
}

final class CollectPartition
  extends ((TaskContext, Iterator[(Int, Array[Double])]) => Array[(Int, Array[Double])])
  with Serializable {
  def apply(context: TaskContext, parts: Iterator[(Int, Array[Double])])
      : Array[(Int, Array[Double])] = parts.toArray
}

final class MergePartition(merge: OrderedAggregate.Merge)
  extends ((Int, Iterator[Array[Double]]) => Iterator[(Int, Array[Double])]) with Serializable {
  def apply(index: Int, parts: Iterator[Array[Double]]): Iterator[(Int, Array[Double])] =
    Iterator.single((index, parts.foldLeft(Array.emptyDoubleArray)(merge)))
}

final class ToGroup(scale: Int)
  extends (((Int, Array[Double])) => (Int, (Int, Array[Double]))) with Serializable {
  def apply(part: (Int, Array[Double])): (Int, (Int, Array[Double])) = (part._1 / scale, part)
}

final class MergeGroup(merge: OrderedAggregate.Merge)
  extends (((Int, Iterable[(Int, Array[Double])])) => (Int, Array[Double])) with Serializable {
  def apply(group: (Int, Iterable[(Int, Array[Double])])): (Int, Array[Double]) =
    (group._1, group._2.toSeq.sortBy(_._1).map(_._2).foldLeft(Array.emptyDoubleArray)(merge))
}
