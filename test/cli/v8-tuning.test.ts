import { describe, expect, it } from 'vitest';
import { tuneV8, V8_TUNING } from '../../src/cli/v8-tuning.js';

describe('V8 tuning of the long-running commands', () => {
  it('applies each setting unless the command line chose its own, in either spelling', () => {
    const all = [`--heap-growing-percent=${V8_TUNING['heap-growing-percent']}`, `--interrupt-budget=${V8_TUNING['interrupt-budget']}`];
    expect(tuneV8(['--enable-source-maps'])).toEqual(all);
    expect(tuneV8(['--heap-growing-percent=50'])).toEqual([all[1]]);
    expect(tuneV8(['--heap_growing_percent', '50'])).toEqual([all[1]]);
    expect(tuneV8(['--interrupt_budget=1000', '--heap-growing-percent=50'])).toEqual([]);
    // A flag that only starts with a tuned name is not that flag.
    expect(tuneV8(['--interrupt-budget-for-feedback-allocation=10'])).toEqual(all);
  });
});
