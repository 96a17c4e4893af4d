package io.gradspark.kernels

import java.util.SplittableRandom

import dev.ludovic.netlib.blas.BLAS
import org.apache.spark.SparkContext
import org.apache.spark.broadcast.Broadcast

/** Per-row losses of gradspark/losses.py, over a block of margins.
 *
 * `evaluate` overwrites margins (n x k, row-major) with the weighted
 * d loss / d margins and returns the weighted loss sum; d_aux is added to
 * `dAux`. numpy's formulas, in overflow-free forms that may differ from numpy's in
 * the last bit or two (the engines are compared to 1e-10).
 */
object Losses {
  def evaluate(
      loss: String, constants: Array[Double], margins: Array[Double], k: Int,
      labels: Array[Double], weights: Array[Double], aux: Array[Double],
      dAux: Array[Double]): Double = {
    val n = labels.length
    var sum = 0.0
    var i = 0
    loss match {
      case "logistic" =>
        while (i < n) {
          val m = margins(i)
          val y = labels(i)
          val w = weights(i)
          // One exp and one log1p per row (log1p is not a JVM intrinsic): e = exp(-|m|)
          // gives softplus(m) and sigmoid(m) without overflow.
          val e = math.exp(-math.abs(m))
          sum += w * (math.max(m, 0.0) + math.log1p(e) - y * m)
          val prob = if (m >= 0) 1.0 / (1.0 + e) else e / (1.0 + e)
          margins(i) = w * (prob - y)
          i += 1
        }
      case "multinomial" =>
        while (i < n) {
          val base = i * k
          val label = labels(i).toInt
          if (label >= k) {
            throw new IllegalArgumentException(
              s"label $label is out of range for a multinomial loss with $k classes")
          }
          var max = Double.NegativeInfinity
          var c = 0
          while (c < k) { if (margins(base + c) > max) max = margins(base + c); c += 1 }
          var s = 0.0
          c = 0
          while (c < k) { s += math.exp(margins(base + c) - max); c += 1 }
          val w = weights(i)
          sum += w * -((margins(base + label) - max) - math.log(s))
          c = 0
          while (c < k) {
            var p = math.exp(margins(base + c) - max) / s
            if (c == label) p -= 1.0
            margins(base + c) = p * w
            c += 1
          }
          i += 1
        }
      case "squaredError" =>
        val shift = constants(0)
        val scale = constants(1)
        while (i < n) {
          val r = margins(i) - (labels(i) - shift) / scale
          val w = weights(i)
          sum += w * (r * r)
          margins(i) = w * r
          i += 1
        }
        sum *= 0.5
      case "huber" =>
        val eps = constants(0)
        val sigma = aux(0)
        var dSigma = 0.0
        while (i < n) {
          val r = labels(i) - margins(i)
          val w = weights(i)
          val a = math.abs(r)
          if (a <= eps * sigma) {
            sum += w * (sigma + r * r / sigma)
            margins(i) = w * (-r / sigma)
            dSigma += w * (1.0 - (r / sigma) * (r / sigma))
          } else {
            sum += w * (sigma + 2.0 * eps * a - eps * eps * sigma)
            margins(i) = w * (-eps * math.signum(r))
            dSigma += w * (1.0 - eps * eps)
          }
          i += 1
        }
        sum *= 0.5
        dAux(0) += 0.5 * dSigma
      case "hinge" =>
        while (i < n) {
          val s = 2.0 * labels(i) - 1.0
          val slack = 1.0 - s * margins(i)
          val w = weights(i)
          if (slack > 0) { sum += w * slack; margins(i) = -w * s } else margins(i) = 0.0
          i += 1
        }
      case other => throw new IllegalArgumentException(s"unknown loss $other")
    }
    sum
  }
}

object Kernels {
  /** Dense products through netlib BLAS (what MLlib uses) instead of plain loops.
   *
   * Off: with pyspark's jars there is no native BLAS (libblas.so.3), and the
   * Java fallback measured 0.90 s/step against 0.41 s/step for these loops
   * (logistic, 1,000,000 x 100 dense, local[2]). PythonEntry.setUseBlas(true)
   * switches it on where a native BLAS is installed.
   */
  @volatile var useBlas: Boolean = false

  /** margins (n x k) = X (n x d) @ coef (d x k) + offset, all row-major. */
  def margins(b: Block, coef: Array[Double], offset: Array[Double], k: Int): Array[Double] = {
    val n = b.numRows
    val d = b.numCols
    val out = new Array[Double](n * k)
    if (!b.isSparse) {
      if (useBlas) {
        val blas = BLAS.getInstance()
        // Row-major X is column-major X^T (d x n); row-major coef is column-major coef^T.
        if (k == 1) blas.dgemv("T", d, n, 1.0, b.dense, d, coef, 1, 0.0, out, 1)
        else blas.dgemm("N", "N", k, n, d, 1.0, coef, k, b.dense, d, 0.0, out, k)
      } else {
        val x = b.dense
        var i = 0
        while (i < n) {
          val base = i * d
          if (k == 1) {
            // Four running sums: one chain of dependent additions cannot use the
            // CPU's parallel floating-point units (a fixed order: still reproducible).
            var s0 = 0.0
            var s1 = 0.0
            var s2 = 0.0
            var s3 = 0.0
            var j = 0
            while (j + 3 < d) {
              s0 += x(base + j) * coef(j)
              s1 += x(base + j + 1) * coef(j + 1)
              s2 += x(base + j + 2) * coef(j + 2)
              s3 += x(base + j + 3) * coef(j + 3)
              j += 4
            }
            while (j < d) { s0 += x(base + j) * coef(j); j += 1 }
            out(i) = (s0 + s1) + (s2 + s3)
          } else {
            var j = 0
            while (j < d) {
              val v = x(base + j)
              var c = 0
              while (c < k) { out(i * k + c) += v * coef(j * k + c); c += 1 }
              j += 1
            }
          }
          i += 1
        }
      }
    } else if (k == 1) {
      // The common case, kept in registers: a row's margin and the CSR arrays as locals,
      // and four running sums as in the dense loop (one chain of dependent additions
      // waits ~4 cycles per non-zero).
      val indptr = b.indptr
      val indices = b.indices
      val values = b.values
      var i = 0
      while (i < n) {
        var s0 = 0.0
        var s1 = 0.0
        var s2 = 0.0
        var s3 = 0.0
        var p = indptr(i)
        val end = indptr(i + 1)
        while (p + 3 < end) {
          s0 += values(p) * coef(indices(p))
          s1 += values(p + 1) * coef(indices(p + 1))
          s2 += values(p + 2) * coef(indices(p + 2))
          s3 += values(p + 3) * coef(indices(p + 3))
          p += 4
        }
        while (p < end) { s0 += values(p) * coef(indices(p)); p += 1 }
        out(i) = (s0 + s1) + (s2 + s3)
        i += 1
      }
    } else {
      var i = 0
      while (i < n) {
        var p = b.indptr(i)
        while (p < b.indptr(i + 1)) {
          val j = b.indices(p)
          val v = b.values(p)
          var c = 0
          while (c < k) { out(i * k + c) += v * coef(j * k + c); c += 1 }
          p += 1
        }
        i += 1
      }
    }
    var i = 0
    while (i < n) {
      var c = 0
      while (c < k) { out(i * k + c) += offset(c); c += 1 }
      i += 1
    }
    out
  }

  /** xtg (d x k, row-major) += X^T g, g (n x k) row-major. */
  def addXtg(b: Block, g: Array[Double], k: Int, xtg: Array[Double]): Unit = {
    val n = b.numRows
    val d = b.numCols
    if (!b.isSparse) {
      if (useBlas) {
        val blas = BLAS.getInstance()
        if (k == 1) blas.dgemv("N", d, n, 1.0, b.dense, d, g, 1, 1.0, xtg, 1)
        else blas.dgemm("N", "T", k, d, n, 1.0, g, k, b.dense, d, 1.0, xtg, k)
      } else {
        val x = b.dense
        var i = 0
        while (i < n) {
          val base = i * d
          var j = 0
          if (k == 1) {
            val gi = g(i)
            while (j < d) { xtg(j) += x(base + j) * gi; j += 1 }
          } else {
            while (j < d) {
              val v = x(base + j)
              var c = 0
              while (c < k) { xtg(j * k + c) += v * g(i * k + c); c += 1 }
              j += 1
            }
          }
          i += 1
        }
      }
    } else if (k == 1) {
      val indptr = b.indptr
      val indices = b.indices
      val values = b.values
      var i = 0
      while (i < n) {
        val gi = g(i)
        var p = indptr(i)
        val end = indptr(i + 1)
        while (p < end) { xtg(indices(p)) += values(p) * gi; p += 1 }
        i += 1
      }
    } else {
      var i = 0
      while (i < n) {
        var p = b.indptr(i)
        while (p < b.indptr(i + 1)) {
          val j = b.indices(p)
          val v = b.values(p)
          var c = 0
          while (c < k) { xtg(j * k + c) += v * g(i * k + c); c += 1 }
          p += 1
        }
        i += 1
      }
    }
  }

  /** The row-sampling generator of (seed, step, partition): splitmix-style mixing. */
  def sampler(seed: Long, step: Int, partition: Int): SplittableRandom = {
    def mix(z0: Long): Long = {
      var z = z0
      z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L
      z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL
      z ^ (z >>> 31)
    }
    new SplittableRandom(mix(mix(mix(seed) + step.toLong) + partition.toLong))
  }
}

/** What a step's tasks read the weights from.
 *
 * Up to InlineLimit doubles they travel inside the task closure: Spark
 * broadcasts every stage's closure anyway, and a broadcast of their own plus
 * its destroy cost about 5.6 ms of a step's driver time (a 10,000-feature
 * step). Larger ones get their own broadcast, destroyed after the job, so
 * that no large closure waits in the block manager for the context cleaner.
 */
sealed trait StepWeights extends Serializable {
  def value: Array[Double]
  def release(): Unit
}

object StepWeights {
  val InlineLimit: Int = 1 << 17 // 1 MiB of float64

  def apply(sc: SparkContext, weights: Array[Double]): StepWeights =
    if (weights.length <= InlineLimit) new InlineWeights(weights)
    else new BroadcastWeights(sc.broadcast(weights))
}

final class InlineWeights(val value: Array[Double]) extends StepWeights {
  def release(): Unit = ()
}

final class BroadcastWeights(weights: Broadcast[Array[Double]]) extends StepWeights {
  def value: Array[Double] = weights.value
  def release(): Unit = weights.destroy()
}

/** One partition's gradient sums, flat: xtg (d*k), gsum (k), d_aux, loss_sum, weight_sum, count.
 *
 * The weights are coef (d*k row-major), offset (k), aux.
 */
final class GradientFunction(
    params: StepWeights, loss: String, constants: Array[Double],
    d: Int, k: Int, numAux: Int, fraction: Double, seed: Long, step: Int)
  extends ((Int, Iterator[Block]) => Iterator[Array[Double]]) with Serializable {

  def apply(partition: Int, blocks: Iterator[Block]): Iterator[Array[Double]] = {
    // The kernels read coef(0 until d * k) and add X^T g into out(0 until d * k): no
    // d-sized copies (on wide models each was a few tens of MB per task per step).
    val coef = params.value
    val offset = java.util.Arrays.copyOfRange(coef, d * k, d * k + k)
    val aux = java.util.Arrays.copyOfRange(coef, d * k + k, d * k + k + numAux)
    val rng = if (fraction < 1.0) Kernels.sampler(seed, step, partition) else null
    Iterator.single(GradientSums.of(blocks, coef, offset, aux, loss, constants, d, k, fraction,
      rng))
  }
}

object GradientSums {
  /** Sums of the (sampled) rows of `blocks` on d features, in the layout of
   *  GradientFunction; coef is read at 0 until d * k. */
  def of(
      blocks: Iterator[Block], coef: Array[Double], offset: Array[Double], aux: Array[Double],
      loss: String, constants: Array[Double], d: Int, k: Int, fraction: Double,
      rng: SplittableRandom): Array[Double] = {
    val numAux = aux.length
    val size = d * k + k + numAux
    val out = new Array[Double](size + 3)
    val dAux = new Array[Double](numAux)
    blocks.foreach { full =>
      val b =
        if (rng == null) full
        else full.select(Array.fill(full.numRows)(rng.nextDouble() < fraction))
      if (b.numRows > 0) {
        val g = Kernels.margins(b, coef, offset, k)
        out(size) += Losses.evaluate(loss, constants, g, k, b.labels, b.weights, aux, dAux)
        Kernels.addXtg(b, g, k, out)
        var i = 0
        while (i < b.numRows) {
          var c = 0
          while (c < k) { out(d * k + c) += g(i * k + c); c += 1 }
          i += 1
        }
        var ws = 0.0
        i = 0
        while (i < b.numRows) { ws += b.weights(i); i += 1 }
        out(size + 1) += ws
        out(size + 2) += b.numRows
      }
    }
    System.arraycopy(dAux, 0, out, d * k + k, numAux)
    out
  }
}

final class SumArraysFunction extends ((Array[Double], Array[Double]) => Array[Double])
  with Serializable {
  def apply(a: Array[Double], b: Array[Double]): Array[Double] = {
    if (a.isEmpty) return b
    if (b.isEmpty) return a
    // In place: every array here is a task's own result or a partial sum made from
    // them (deserialized copies), never shared.
    var i = 0
    while (i < a.length) { a(i) += b(i); i += 1 }
    a
  }
}
