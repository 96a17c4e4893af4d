package io.gradspark.kernels

/** Weighted column statistics, as gradspark/data/statistics.py computes them.
 *
 * One flat Array[Double] per (partial) result, so nothing but a primitive
 * array ever goes back to the driver. Empty array = no rows (python's None).
 * Layout: count, weight_sum, weight_sq_sum, label_max, label_mean, label_m2,
 * num_classes, stored entries (CSR non-zeros, n * d for dense blocks), feature
 * mean (d), feature m2 (d), class weights (num_classes).
 * Means/M2 are merged with Chan et al.'s parallel update.
 */
object Statistics {
  val Header = 8

  /** withFeatures = false: the layout of a 0-feature block (header and classes only). */
  def ofBlock(b: Block, trackClasses: Boolean, withFeatures: Boolean = true): Array[Double] = {
    val n = b.numRows
    val d = if (withFeatures) b.numCols else 0
    val y = b.labels
    val w = b.weights
    var total = 0.0
    var wsq = 0.0
    var i = 0
    while (i < n) { total += w(i); wsq += w(i) * w(i); i += 1 }
    val mean = new Array[Double](d)
    val m2 = new Array[Double](d)
    var yMean = 0.0
    var yM2 = 0.0
    if (total > 0) {
      if (d == 0) {
        // header and label statistics only
      } else if (b.isSparse) {
        i = 0
        while (i < n) {
          var p = b.indptr(i)
          while (p < b.indptr(i + 1)) {
            val j = b.indices(p)
            val v = b.values(p)
            mean(j) += v * w(i)
            m2(j) += v * v * w(i)
            p += 1
          }
          i += 1
        }
        var j = 0
        while (j < d) { mean(j) /= total; m2(j) -= total * mean(j) * mean(j); j += 1 }
      } else {
        val x = b.dense
        i = 0
        while (i < n) {
          var j = 0
          val base = i * d
          while (j < d) { mean(j) += w(i) * x(base + j); j += 1 }
          i += 1
        }
        var j = 0
        while (j < d) { mean(j) /= total; j += 1 }
        i = 0
        while (i < n) {
          var j = 0
          val base = i * d
          while (j < d) { val c = x(base + j) - mean(j); m2(j) += w(i) * c * c; j += 1 }
          i += 1
        }
      }
      var j = 0
      while (j < d) { if (!(m2(j) >= 0.0)) m2(j) = 0.0; j += 1 }
      i = 0
      while (i < n) { yMean += w(i) * y(i); i += 1 }
      yMean /= total
      i = 0
      while (i < n) { val c = y(i) - yMean; yM2 += w(i) * c * c; i += 1 }
    }
    var labelMax = Double.NegativeInfinity
    i = 0
    while (i < n) { if (y(i) > labelMax) labelMax = y(i); i += 1 }
    val classes: Array[Double] =
      if (trackClasses && n > 0) {
        val c = new Array[Double](labelMax.toInt + 1)
        i = 0
        while (i < n) { c(y(i).toInt) += w(i); i += 1 }
        c
      } else Array.emptyDoubleArray
    val out = new Array[Double](Header + 2 * d + classes.length)
    out(0) = n; out(1) = total; out(2) = wsq; out(3) = labelMax
    out(4) = yMean; out(5) = yM2; out(6) = classes.length
    out(7) = if (b.isSparse) b.values.length.toDouble else n.toDouble * b.numCols
    System.arraycopy(mean, 0, out, Header, d)
    System.arraycopy(m2, 0, out, Header + d, d)
    System.arraycopy(classes, 0, out, Header + 2 * d, classes.length)
    out
  }

  /** A full flat result from a 0-feature one and the weighted sums of x and x^2. */
  def withSums(header: Array[Double], s1: Array[Double], s2: Array[Double]): Array[Double] = {
    if (header.isEmpty) return header
    val d = s1.length
    val k = header(6).toInt
    val out = new Array[Double](Header + 2 * d + k)
    System.arraycopy(header, 0, out, 0, Header)
    System.arraycopy(header, Header, out, Header + 2 * d, k)
    val total = header(1)
    if (total > 0) {
      var j = 0
      while (j < d) {
        val mean = s1(j) / total
        val m2 = s2(j) - total * mean * mean
        out(Header + j) = mean
        out(Header + d + j) = if (m2 >= 0.0) m2 else 0.0
        j += 1
      }
    }
    out
  }

  /** merge_statistics (python), on flat arrays of the same num_features d. */
  def merge(a: Array[Double], b: Array[Double], d: Int): Array[Double] = {
    if (a.isEmpty) return b
    if (b.isEmpty) return a
    val ka = a(6).toInt
    val kb = b(6).toInt
    val k = math.max(ka, kb)
    val out = new Array[Double](Header + 2 * d + k)
    out(0) = a(0) + b(0)
    out(2) = a(2) + b(2)
    out(3) = math.max(a(3), b(3))
    out(6) = k
    out(7) = a(7) + b(7)
    val wa = a(1)
    val wb = b(1)
    val total = wa + wb
    out(1) = total
    if (wb == 0) {
      out(4) = a(4); out(5) = a(5)
      System.arraycopy(a, Header, out, Header, 2 * d)
    } else if (wa == 0) {
      out(4) = b(4); out(5) = b(5)
      System.arraycopy(b, Header, out, Header, 2 * d)
    } else {
      val f = wb / total
      val g = wa * wb / total
      val dy = b(4) - a(4)
      out(4) = a(4) + dy * f
      out(5) = a(5) + b(5) + dy * dy * g
      var j = 0
      while (j < d) {
        val delta = b(Header + j) - a(Header + j)
        out(Header + j) = a(Header + j) + delta * f
        out(Header + d + j) = a(Header + d + j) + b(Header + d + j) + delta * delta * g
        j += 1
      }
    }
    var c = 0
    while (c < ka) { out(Header + 2 * d + c) += a(Header + 2 * d + c); c += 1 }
    c = 0
    while (c < kb) { out(Header + 2 * d + c) += b(Header + 2 * d + c); c += 1 }
    out
  }
}

/** A partition's statistics. Dense blocks are merged block by block (Chan et al.);
 * CSR blocks sum w x and w x^2 per feature. A partition of only CSR blocks answers
 * with its non-zero sums alone (SparseStatistics): at 2^24 features a dense answer is
 * 268 MB, and four of them exceed spark.driver.maxResultSize.
 *
 * Where the sums go is chosen at the partition's first CSR block: into one pair of
 * d-arrays for the partition (O(non-zeros) plus O(d) once) while d is at most
 * SortedAbove times that block's non-zeros, else block by block into sorted sparse
 * partials merged as they come (O(non-zeros log) and nothing d-sized): at 2^24 the
 * pair of d-arrays is 268 MB to allocate, scatter into at random and scan, per
 * partition. (Integer-valued data sums exactly either way; otherwise the two orders
 * of addition can differ in the last bits.) */
final class PartitionStatisticsFunction(trackClasses: Boolean, d: Int)
  extends (Iterator[Block] => Iterator[Array[Double]]) with Serializable {
  def apply(blocks: Iterator[Block]): Iterator[Array[Double]] = {
    var dense = Array.emptyDoubleArray
    var sparseHeader = Array.emptyDoubleArray // layout of d = 0
    var s1: Array[Double] = null
    var s2: Array[Double] = null
    var sorted: Array[Double] = null // the SparseStatistics partial of the blocks so far
    var decided = false
    var bySorting = false
    blocks.foreach { b =>
      if (!b.isSparse) dense = Statistics.merge(dense, Statistics.ofBlock(b, trackClasses), d)
      else {
        val header = Statistics.ofBlock(b, trackClasses, withFeatures = false)
        if (!decided) {
          bySorting = d.toLong > PartitionStatisticsFunction.SortedAbove * b.indptr(b.numRows)
          decided = true
        }
        if (bySorting) {
          val partial = SparseStatistics.ofBlock(b, header)
          sorted = if (sorted == null) partial else SparseStatistics.merge(sorted, partial)
        } else {
          if (s1 == null) { s1 = new Array[Double](d); s2 = new Array[Double](d) }
          val w = b.weights
          var i = 0
          while (i < b.numRows) {
            var p = b.indptr(i)
            val end = b.indptr(i + 1)
            while (p < end) {
              val v = b.values(p)
              val j = b.indices(p)
              s1(j) += w(i) * v
              s2(j) += w(i) * v * v
              p += 1
            }
            i += 1
          }
          sparseHeader = Statistics.merge(sparseHeader, header, 0)
        }
      }
    }
    val sparse = if (sorted != null) sorted
      else if (s1 != null) SparseStatistics(sparseHeader, s1, s2) else null
    if (sparse == null) Iterator.single(dense)
    else if (dense.isEmpty) Iterator.single(sparse)
    else Iterator.single(Statistics.merge(dense, SparseStatistics.toDense(sparse, d), d))
  }
}

object PartitionStatisticsFunction {
  /** d-arrays while d <= this many times the first CSR block's non-zeros: at 16 the sorted
   *  partials were 0.2-0.7 s slower per pass than the d-arrays at 2^22 (200k rows, 30-55
   *  non-zeros a row, 4 partitions), and 0.4-0.7 s faster at 2^24. */
  val SortedAbove = 64L
}

/** Statistics of CSR rows as their weighted sums of x and x^2 on the features that occur.
 *
 * Layout: -1 (a tag: a flat Statistics array starts with a count >= 0), the
 * 0-feature header and class weights (Statistics.Header + k values), u, then u
 * feature indices, u sums of w x and u sums of w x^2, indices ascending.
 * Two such partials merge by a sorted union; with a dense one, through
 * Statistics.withSums.
 */
object SparseStatistics {
  def apply(header: Array[Double], s1: Array[Double], s2: Array[Double]): Array[Double] = {
    var u = 0
    var j = 0
    while (j < s1.length) { if (s1(j) != 0.0 || s2(j) != 0.0) u += 1; j += 1 }
    val out = new Array[Double](2 + header.length + 3 * u)
    out(0) = -1.0
    System.arraycopy(header, 0, out, 1, header.length)
    val base = 1 + header.length
    out(base) = u
    var q = 0
    j = 0
    while (j < s1.length) {
      if (s1(j) != 0.0 || s2(j) != 0.0) {
        out(base + 1 + q) = j
        out(base + 1 + u + q) = s1(j)
        out(base + 1 + 2 * u + q) = s2(j)
        q += 1
      }
      j += 1
    }
    out
  }

  def is(a: Array[Double]): Boolean = a.nonEmpty && a(0) < 0

  /** One CSR block's partial: its entries sorted by feature (then by position, so each
   *  feature's rows add in row order), summed per feature. */
  def ofBlock(b: Block, header: Array[Double]): Array[Double] = {
    val nnz = b.indptr(b.numRows)
    val keys = new Array[Long](nnz)
    val rowWeight = new Array[Double](nnz)
    var i = 0
    while (i < b.numRows) {
      var p = b.indptr(i)
      while (p < b.indptr(i + 1)) {
        keys(p) = (b.indices(p).toLong << 32) | p
        rowWeight(p) = b.weights(i)
        p += 1
      }
      i += 1
    }
    java.util.Arrays.sort(keys)
    val idx = new Array[Double](nnz)
    val s1 = new Array[Double](nnz)
    val s2 = new Array[Double](nnz)
    var u = -1
    var last = -1L
    var q = 0
    while (q < nnz) {
      val j = keys(q) >>> 32
      val p = (keys(q) & 0xffffffffL).toInt
      if (j != last) { u += 1; idx(u) = j.toDouble; last = j }
      val v = b.values(p)
      s1(u) += rowWeight(p) * v
      s2(u) += rowWeight(p) * v * v
      q += 1
    }
    packed(header, idx, s1, s2, u + 1)
  }

  /** The layout from a header and the first u of the index and sum arrays. */
  private def packed(header: Array[Double], idx: Array[Double], s1: Array[Double],
                     s2: Array[Double], u: Int): Array[Double] = {
    val out = new Array[Double](2 + header.length + 3 * u)
    out(0) = -1.0
    System.arraycopy(header, 0, out, 1, header.length)
    val base = 1 + header.length
    out(base) = u
    System.arraycopy(idx, 0, out, base + 1, u)
    System.arraycopy(s1, 0, out, base + 1 + u, u)
    System.arraycopy(s2, 0, out, base + 1 + 2 * u, u)
    out
  }


  private def headerLength(a: Array[Double]): Int = Statistics.Header + a(1 + 6).toInt

  def header(a: Array[Double]): Array[Double] = java.util.Arrays.copyOfRange(a, 1, 1 + headerLength(a))

  /** The flat Statistics layout of d features. */
  def toDense(a: Array[Double], d: Int): Array[Double] = {
    val base = 1 + headerLength(a)
    val u = a(base).toInt
    val s1 = new Array[Double](d)
    val s2 = new Array[Double](d)
    var q = 0
    while (q < u) {
      val j = a(base + 1 + q).toInt
      s1(j) = a(base + 1 + u + q)
      s2(j) = a(base + 1 + 2 * u + q)
      q += 1
    }
    Statistics.withSums(header(a), s1, s2)
  }

  /** Two sparse partials: headers merged, sums added over the union of their features. */
  def merge(a: Array[Double], b: Array[Double]): Array[Double] = {
    val head = Statistics.merge(header(a), header(b), 0)
    val ba = 1 + headerLength(a)
    val bb = 1 + headerLength(b)
    val ua = a(ba).toInt
    val ub = b(bb).toInt
    val idx = new Array[Double](ua + ub)
    val s1 = new Array[Double](ua + ub)
    val s2 = new Array[Double](ua + ub)
    var p = 0
    var q = 0
    var u = 0
    while (p < ua || q < ub) {
      val ja = if (p < ua) a(ba + 1 + p) else Double.MaxValue
      val jb = if (q < ub) b(bb + 1 + q) else Double.MaxValue
      idx(u) = math.min(ja, jb)
      if (ja <= jb) { s1(u) += a(ba + 1 + ua + p); s2(u) += a(ba + 1 + 2 * ua + p); p += 1 }
      if (jb <= ja) { s1(u) += b(bb + 1 + ub + q); s2(u) += b(bb + 1 + 2 * ub + q); q += 1 }
      u += 1
    }
    packed(head, idx, s1, s2, u)
  }
}

/** Merges dense (Chan) and sparse (raw sums) partials; python densifies a sparse result
 *  (gradspark.data.jvm._statistics), as SparseStatistics.toDense would. */
final class MergeStatisticsFunction(d: Int)
  extends ((Array[Double], Array[Double]) => Array[Double]) with Serializable {
  def apply(a: Array[Double], b: Array[Double]): Array[Double] = {
    if (a.isEmpty) return b
    if (b.isEmpty) return a
    if (SparseStatistics.is(a) && SparseStatistics.is(b)) return SparseStatistics.merge(a, b)
    def dense(x: Array[Double]) = if (SparseStatistics.is(x)) SparseStatistics.toDense(x, d) else x
    Statistics.merge(dense(a), dense(b), d)
  }
}

/** A partition's statistics (Statistics or SparseStatistics layout) with the size of its
 *  vectors (-1: no rows) and the first partition they cover, for the blockify pass that
 *  learns the vectors' size as it goes (BlockifyFunction): `(width, partition, stats)`.
 *
 *  A tuple of Scala and Java types, not a class of this jar: task results are
 *  deserialized on the driver by Spark's class loader (see SparseSums). */
object SizedStatistics {
  type T = (Int, Int, Array[Double])

  val Empty: T = (-1, -1, Array.emptyDoubleArray)
}

final class SizedPartitionStatisticsFunction(trackClasses: Boolean)
  extends ((Int, Iterator[Block]) => Iterator[SizedStatistics.T]) with Serializable {
  def apply(partition: Int, blocks: Iterator[Block]): Iterator[SizedStatistics.T] = {
    if (!blocks.hasNext) return Iterator.single(SizedStatistics.Empty)
    val first = blocks.next()
    val d = first.numCols
    val stats = new PartitionStatisticsFunction(trackClasses, d)(Iterator.single(first) ++ blocks)
    Iterator.single((d, partition, stats.next()))
  }
}

/** Merges partitions' statistics in partition order (OrderedAggregate), refusing vectors
 *  of different sizes: every partition's row 0 set its size, so the error can name it. */
final class MergeSizedStatisticsFunction(featuresCol: String)
  extends ((SizedStatistics.T, SizedStatistics.T) => SizedStatistics.T) with Serializable {
  def apply(a: SizedStatistics.T, b: SizedStatistics.T): SizedStatistics.T = {
    val (widthA, partitionA, statsA) = a
    val (widthB, partitionB, statsB) = b
    if (widthA < 0) return b
    if (widthB < 0) return a
    if (widthA != widthB) {
      throw Blocks.dataError(
        s"features column ${Blocks.quoted(featuresCol)} has a vector of size $widthB at " +
          s"partition $partitionB, row 0, but row 0 of partition $partitionA has size " +
          s"$widthA; all feature vectors must have the same size")
    }
    (widthA, partitionA, new MergeStatisticsFunction(widthA)(statsA, statsB))
  }
}
