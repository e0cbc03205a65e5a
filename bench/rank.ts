/** Nearest-rank percentile index: the q-quantile of n sorted values is at this index (q in [0, 1]). */
export const nearestRank = (q: number, n: number): number => Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1));
