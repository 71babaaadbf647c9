// Image attachments: the scaled size and the size of a data: URL.

import { describe, expect, it } from 'vitest';
import { dataUrlBytes, fitWithin, isImageFile } from './images';

describe('images', () => {
  it('scale the long side down to the limit, keeping the shape', () => {
    expect(fitWithin(4000, 3000, 2048)).toEqual({ width: 2048, height: 1536 });
    expect(fitWithin(1000, 5000, 2048)).toEqual({ width: 410, height: 2048 });
    expect(fitWithin(800, 600, 2048)).toEqual({ width: 800, height: 600 });
  });
  it('count the bytes of a data: URL', () => {
    expect(dataUrlBytes('data:image/png;base64,AAAA')).toBe(3);
    expect(dataUrlBytes('data:image/png;base64,AAA=')).toBe(2);
    expect(dataUrlBytes('nonsense')).toBe(0);
  });
  it('take common image types only', () => {
    expect(isImageFile({ type: 'image/png' })).toBe(true);
    expect(isImageFile({ type: 'image/svg+xml' })).toBe(false);
  });
});
