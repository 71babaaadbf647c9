// Images attached to a message: picked or pasted files read into data: URLs. A large photo is
// scaled down first (models see images at about a megapixel anyway, and a 12-megapixel photo
// would make a request of tens of megabytes); the math is pure, the reading needs the browser.

/** The longest side an attached image keeps. */
export const MAX_IMAGE_SIDE = 2048;
/** A file under this size whose sides fit is sent as it is. */
export const KEEP_AS_IS_BYTES = 1_500_000;
/** The most images one message takes. */
export const MAX_IMAGES = 8;

export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];

/** The size to draw an image at so that neither side passes `max`, keeping its shape. */
export function fitWithin(width: number, height: number, max = MAX_IMAGE_SIDE): { width: number; height: number } {
  if (width <= max && height <= max) return { width, height };
  const scale = max / Math.max(width, height);
  return { width: Math.max(1, Math.round(width * scale)), height: Math.max(1, Math.round(height * scale)) };
}

/** The bytes a base64 data: URL holds. */
export function dataUrlBytes(url: string): number {
  const comma = url.indexOf(',');
  if (comma < 0) return 0;
  const b64 = url.slice(comma + 1);
  const pad = b64.endsWith('==') ? 2 : b64.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((b64.length * 3) / 4) - pad);
}

export function isImageFile(f: { type: string }): boolean {
  return IMAGE_TYPES.includes(f.type);
}

function readAsDataUrl(blob: Blob): Promise<string> {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error ?? new Error('could not read the file'));
    r.readAsDataURL(blob);
  });
}

/** A file as a data: URL, scaled down when it is large (browser only). */
export async function imageToDataUrl(file: File): Promise<string> {
  if (!isImageFile(file)) throw new Error(`${file.name || 'The file'} is not a PNG, JPEG, WebP or GIF image`);
  const bitmap = await createImageBitmap(file).catch(() => null);
  if (!bitmap) throw new Error(`${file.name || 'The image'} could not be read as an image`);
  const size = fitWithin(bitmap.width, bitmap.height);
  const small = size.width === bitmap.width && size.height === bitmap.height;
  // A GIF is kept as it is (drawing it would keep one frame).
  if ((small && file.size <= KEEP_AS_IS_BYTES) || file.type === 'image/gif') {
    bitmap.close();
    return readAsDataUrl(file);
  }
  const canvas = document.createElement('canvas');
  canvas.width = size.width;
  canvas.height = size.height;
  const ctx = canvas.getContext('2d');
  if (!ctx) {
    bitmap.close();
    return readAsDataUrl(file);
  }
  ctx.drawImage(bitmap, 0, 0, size.width, size.height);
  bitmap.close();
  // PNG keeps transparency and screenshots' sharp text, unless that is large; photos go as JPEG.
  if (file.type === 'image/png') {
    const png = canvas.toDataURL('image/png');
    if (dataUrlBytes(png) <= KEEP_AS_IS_BYTES) return png;
  }
  return canvas.toDataURL('image/jpeg', 0.9);
}
