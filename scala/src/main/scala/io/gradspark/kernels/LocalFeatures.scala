package io.gradspark.kernels

/** Partition-local feature indices: a step's cost in the non-zeros, not the width.
 *
 * On wide sparse data a partition holds a fraction of the features, yet a
 * dense step has every task allocate, fill, serialize and return a d-sized
 * sum, and the driver merge P of them. A `LocalPartition` renumbers its CSR
 * blocks once per fit to the u features it holds (ascending, so the entries
 * stay in their order), and a step's task gathers those u weights, runs the
 * same kernels on u columns and returns `SparseSums` over them: 12 bytes per
 * held feature instead of 8 per feature of the model. Each coordinate's sum
 * adds the same terms in the same order as the dense task, and the partials
 * merge by a sorted union in OrderedAggregate's fixed order, so the sums are
 * bit-identical to the dense job's at the same tree shape.
 */
final class LocalPartition(val features: Array[Int], val blocks: Array[Block])
  extends Serializable

object LocalPartition {
  /** The partition's blocks on the features they hold; dense blocks become CSR. */
  def apply(blocks: Array[Block]): LocalPartition = {
    val sparse = blocks.map(toCsr)
    var nnz = 0L
    sparse.foreach(b => nnz += b.indices.length)
    if (nnz > Int.MaxValue - 8) {
      throw new IllegalStateException(
        s"a partition holds $nnz non-zeros; repartition the training data into more partitions")
    }
    val all = new Array[Int](nnz.toInt)
    var p = 0
    sparse.foreach { b =>
      System.arraycopy(b.indices, 0, all, p, b.indices.length)
      p += b.indices.length
    }
    java.util.Arrays.sort(all)
    var u = 0
    var q = 0
    while (q < all.length) {
      if (u == 0 || all(q) != all(u - 1)) { all(u) = all(q); u += 1 }
      q += 1
    }
    val features = java.util.Arrays.copyOf(all, u)
    val local = sparse.map { b =>
      val idx = new Array[Int](b.indices.length)
      var e = 0
      while (e < idx.length) {
        idx(e) = java.util.Arrays.binarySearch(features, b.indices(e))
        e += 1
      }
      new Block(b.numRows, u, null, b.indptr, idx, b.values, b.labels, b.weights, b.firstRow)
    }
    new LocalPartition(features, local)
  }

  private def toCsr(b: Block): Block = {
    if (b.isSparse) return b
    val d = b.numCols
    var nnz = 0
    b.dense.foreach(x => if (x != 0.0) nnz += 1)
    val ptr = new Array[Int](b.numRows + 1)
    val idx = new Array[Int](nnz)
    val vals = new Array[Double](nnz)
    var q = 0
    var i = 0
    while (i < b.numRows) {
      var j = 0
      while (j < d) {
        val x = b.dense(i * d + j)
        if (x != 0.0) { idx(q) = j; vals(q) = x; q += 1 }
        j += 1
      }
      ptr(i + 1) = q
      i += 1
    }
    new Block(b.numRows, d, null, ptr, idx, vals, b.labels, b.weights, b.firstRow)
  }
}

final class LocalizeFunction extends (Iterator[Block] => Iterator[LocalPartition])
  with Serializable {
  def apply(blocks: Iterator[Block]): Iterator[LocalPartition] =
    Iterator.single(LocalPartition(blocks.toArray))
}

/** How many features each partition holds (materializes the local partitions). */
final class HeldFeaturesFunction extends (Iterator[LocalPartition] => Int) with Serializable {
  def apply(parts: Iterator[LocalPartition]): Int = parts.map(_.features.length).sum
}

/** Gradient sums over a few features: `(indices, values)`, `indices` ascending (null for
 *  the empty partial), `values` the k sums per index (index-major) followed by the
 *  dense tail of GradientFunction's layout (gsum, d_aux, loss_sum, weight_sum, count).
 *
 *  A pair of arrays, not a class of this jar: task results are deserialized on the
 *  driver by Spark's class loader, which may not be the one that loaded this jar. */
object SparseSums {
  type T = (Array[Int], Array[Double])

  val Empty: T = (null, null)

  def isEmpty(s: T): Boolean = s._1 == null

  /** GradientFunction's flat layout on d features. */
  def toDense(s: T, d: Int, k: Int): Array[Double] = {
    if (isEmpty(s)) return Array.emptyDoubleArray
    val (indices, values) = s
    val u = indices.length
    val tail = values.length - u * k
    val out = new Array[Double](d * k + tail)
    var q = 0
    while (q < u) {
      System.arraycopy(values, q * k, out, indices(q) * k, k)
      q += 1
    }
    System.arraycopy(values, u * k, out, d * k, tail)
    out
  }
}

/** Adds two partials over the union of their indices (a + b, in that order). */
final class MergeSparseSumsFunction(k: Int)
  extends ((SparseSums.T, SparseSums.T) => SparseSums.T) with Serializable {
  def apply(a: SparseSums.T, b: SparseSums.T): SparseSums.T = {
    if (SparseSums.isEmpty(a)) return b
    if (SparseSums.isEmpty(b)) return a
    val (ai, av) = a
    val (bi, bv) = b
    val ua = ai.length
    val ub = bi.length
    val tail = av.length - ua * k
    val idx = new Array[Int](ua + ub)
    val sums = new Array[Double]((ua + ub) * k + tail)
    var p = 0
    var q = 0
    var u = 0
    while (p < ua || q < ub) {
      val ja = if (p < ua) ai(p) else Int.MaxValue
      val jb = if (q < ub) bi(q) else Int.MaxValue
      idx(u) = math.min(ja, jb)
      var c = 0
      if (ja <= jb) {
        while (c < k) { sums(u * k + c) = av(p * k + c); c += 1 }
        p += 1
      }
      if (jb <= ja) {
        c = 0
        // 0.0 + x == x: a coordinate only b holds gets b's sum exactly, as in the dense merge
        while (c < k) { sums(u * k + c) += bv(q * k + c); c += 1 }
        q += 1
      }
      u += 1
    }
    var t = 0
    while (t < tail) {
      sums(u * k + t) = av(ua * k + t) + bv(ub * k + t)
      t += 1
    }
    (java.util.Arrays.copyOf(idx, u), java.util.Arrays.copyOf(sums, u * k + tail))
  }
}

/** One local partition's gradient sums as SparseSums over the features it holds.
 *
 * The weights are the model's (d*k row-major, offset, aux): the task gathers
 * its u features' rows once, so the kernels run on u columns.
 */
final class LocalGradientFunction(
    params: StepWeights, loss: String, constants: Array[Double],
    d: Int, k: Int, numAux: Int, fraction: Double, seed: Long, step: Int)
  extends ((Int, Iterator[LocalPartition]) => Iterator[SparseSums.T]) with Serializable {

  def apply(partition: Int, parts: Iterator[LocalPartition]): Iterator[SparseSums.T] = {
    val weights = params.value
    val offset = java.util.Arrays.copyOfRange(weights, d * k, d * k + k)
    val aux = java.util.Arrays.copyOfRange(weights, d * k + k, d * k + k + numAux)
    parts.map { part =>
      val u = part.features.length
      val coef = new Array[Double](u * k)
      var q = 0
      while (q < u) {
        System.arraycopy(weights, part.features(q) * k, coef, q * k, k)
        q += 1
      }
      // The sampler of (seed, step, partition) draws the same rows as GradientFunction's.
      val rng = if (fraction < 1.0) Kernels.sampler(seed, step, partition) else null
      val out = GradientSums.of(part.blocks.iterator, coef, offset, aux, loss, constants, u, k,
        fraction, rng)
      (part.features, out)
    }
  }
}
