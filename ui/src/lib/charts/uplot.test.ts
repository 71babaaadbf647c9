// Short axis numbers.

import { describe, expect, it } from 'vitest';
import { axisNumber } from './uplot';

describe('axisNumber', () => {
  it('keeps labels short', () => {
    expect(axisNumber(0)).toBe('0');
    expect(axisNumber(250)).toBe('250');
    expect(axisNumber(12.5)).toBe('13');
    expect(axisNumber(0.5)).toBe('0.5');
  });
});
