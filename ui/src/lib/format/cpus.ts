// CPU lists as the kernel writes them: [0,1,2,3,8,9] → "0-3,8-9". Used for NUMA nodes, where a
// 72-core node would otherwise be a wall of numbers.

export function compactCpuList(cpus: readonly number[]): string {
  const sorted = [...new Set(cpus)].filter((n) => Number.isInteger(n) && n >= 0).sort((a, b) => a - b);
  if (sorted.length === 0) return '';
  const parts: string[] = [];
  let start = sorted[0]!;
  let prev = start;
  for (let i = 1; i <= sorted.length; i++) {
    const n = sorted[i];
    if (n === prev + 1) {
      prev = n;
      continue;
    }
    parts.push(start === prev ? String(start) : `${start}-${prev}`);
    if (n !== undefined) start = prev = n;
  }
  return parts.join(',');
}
