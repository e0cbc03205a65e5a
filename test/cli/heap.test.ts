import { describe, expect, it } from 'vitest';
import { HEAP_GROWING_PERCENT, tuneHeap } from '../../src/cli/heap.js';

describe('heap tuning of the long-running commands', () => {
  it('sets the old-generation growth unless the command line chose its own', () => {
    expect(tuneHeap(['--heap-growing-percent=50'])).toBeUndefined();
    expect(tuneHeap(['--heap_growing_percent', '50'])).toBeUndefined();
    expect(tuneHeap(['--enable-source-maps'])).toBe(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  });
});
