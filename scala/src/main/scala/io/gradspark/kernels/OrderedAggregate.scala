package io.gradspark.kernels

import scala.reflect.ClassTag

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
 * Generic in the partial's type: flat arrays (empty = nothing) and
 * `SparseSums` (`SparseSums.Empty`).
 *
 * Jobs run through `runJob` with named functions rather than `collect()`:
 * collect's lambda makes the closure cleaner parse RDD.class from its jar on
 * every job (about 3 ms of driver CPU per step in a JFR profile), and with
 * one level the partials come back in partition order with no extra RDD.
 */
object OrderedAggregate {
  type Merge = (Array[Double], Array[Double]) => Array[Double]

  /** `parts` yields partial arrays (empty = nothing); `merge` treats empty as zero. */
  def apply(parts: RDD[Array[Double]], merge: Merge, depth: Int): Array[Double] =
    of(parts, merge, Array.emptyDoubleArray, depth)

  /** The same for any partial type: `merge` treats `empty` as zero. */
  def of[T: ClassTag](parts: RDD[T], merge: (T, T) => T, empty: T, depth: Int): T = {
    val sc = parts.sparkContext
    var n = parts.getNumPartitions
    val scale = math.max(math.ceil(math.pow(n.toDouble, 1.0 / math.max(depth, 1))).toInt, 2)
    if (n <= scale + math.ceil(n.toDouble / scale)) {
      // runJob's results are in partition order.
      return sc.runJob(parts, new MergeTaskPartials(merge, empty)).foldLeft(empty)(merge)
    }
    var level: RDD[(Int, T)] = parts.mapPartitionsWithIndex(new MergePartition(merge, empty))
    while (n > scale + math.ceil(n.toDouble / scale)) {
      n = math.ceil(n.toDouble / scale).toInt
      level = level.map(new ToGroup[T](scale)).groupByKey(new HashPartitioner(n))
        .map(new MergeGroup(merge, empty))
    }
    sc.runJob(level, new CollectPartition[T]).flatten.sortBy(_._1).map(_._2).foldLeft(empty)(merge)
  }
}

final class MergeTaskPartials[T](merge: (T, T) => T, empty: T)
  extends ((TaskContext, Iterator[T]) => T) with Serializable {
  def apply(context: TaskContext, parts: Iterator[T]): T = parts.foldLeft(empty)(merge)
}

final class CollectPartition[T: ClassTag]
  extends ((TaskContext, Iterator[(Int, T)]) => Array[(Int, T)]) with Serializable {
  def apply(context: TaskContext, parts: Iterator[(Int, T)]): Array[(Int, T)] = parts.toArray
}

final class MergePartition[T](merge: (T, T) => T, empty: T)
  extends ((Int, Iterator[T]) => Iterator[(Int, T)]) with Serializable {
  def apply(index: Int, parts: Iterator[T]): Iterator[(Int, T)] =
    Iterator.single((index, parts.foldLeft(empty)(merge)))
}

final class ToGroup[T](scale: Int) extends (((Int, T)) => (Int, (Int, T))) with Serializable {
  def apply(part: (Int, T)): (Int, (Int, T)) = (part._1 / scale, part)
}

final class MergeGroup[T](merge: (T, T) => T, empty: T)
  extends (((Int, Iterable[(Int, T)])) => (Int, T)) with Serializable {
  def apply(group: (Int, Iterable[(Int, T)])): (Int, T) =
    (group._1, group._2.toSeq.sortBy(_._1).map(_._2).foldLeft(empty)(merge))
}
