// TensorBoard's scalar smoothing: an exponential moving average whose start is de-biased
// (divided by 1 - w^n, n = finite points seen), so the first points are not pulled towards
// zero. Non-finite and missing points pass through unchanged and do not disturb the average.
export function emaSmooth(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values;
  let last = 0, n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    last = last * weight + (1 - weight) * v;
    n++;
    return last / (1 - Math.pow(weight, n));
  });
}
