package io.gradspark.kernels

import org.apache.spark.HashPartitioner
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
 */
object OrderedAggregate {
  type Merge = (Array[Double], Array[Double]) => Array[Double]

  /** `parts` yields partial arrays (empty = nothing); `merge` treats empty as zero. */
  def apply(parts: RDD[Array[Double]], merge: Merge, depth: Int): Array[Double] = {
    var level: RDD[(Int, Array[Double])] = parts.mapPartitionsWithIndex(new MergePartition(merge))
    var n = parts.getNumPartitions
    val scale = math.max(math.ceil(math.pow(n.toDouble, 1.0 / math.max(depth, 1))).toInt, 2)
    while (n > scale + math.ceil(n.toDouble / scale)) {
      n = math.ceil(n.toDouble / scale).toInt
      level = level.map(new ToGroup(scale)).groupByKey(new HashPartitioner(n))
        .map(new MergeGroup(merge))
    }
    level.collect().sortBy(_._1).map(_._2).foldLeft(Array.emptyDoubleArray)(merge)
  }
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
