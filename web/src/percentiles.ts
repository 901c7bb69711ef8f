// Percentiles of |x| from an exponent histogram (bin i counts |x| in [2^(lo+i), 2^(lo+i+1)),
// zeros counted apart): the rank is found by walking the bins, and placed inside its bin
// geometrically (the bins are powers of two). TensorBoard's distribution chart draws the
// same nine percentiles (the normal distribution's 0, ±1, ±1.5, ±2 sigma and 100 %).

export const BAND_PERCENTILES = [0, 6.68, 15.87, 30.85, 50, 69.15, 84.13, 93.32, 100];

export function histogramPercentiles(counts: number[], exponentLo: number, zeros: number, percentiles: number[],
                                     absMax?: number | null): (number | null)[] {
  let total = zeros;
  for (const c of counts) total += c;
  if (!(total > 0)) return percentiles.map(() => null);
  return percentiles.map((q) => {
    const rank = Math.min(total, Math.max(0, (q / 100) * total));
    if (q >= 100 && absMax !== undefined && absMax !== null && Number.isFinite(absMax)) return absMax;
    if (rank <= zeros && zeros > 0) return 0;
    let seen = zeros;
    for (let b = 0; b < counts.length; b++) {
      const c = counts[b];
      if (!c) continue;
      if (seen + c >= rank) {
        const f = Math.min(1, Math.max(0, (rank - seen) / c));
        const v = 2 ** (exponentLo + b + f);
        return absMax !== undefined && absMax !== null && Number.isFinite(absMax) && absMax > 0 ? Math.min(v, absMax) : v;
      }
      seen += c;
    }
    return absMax ?? null;
  });
}
