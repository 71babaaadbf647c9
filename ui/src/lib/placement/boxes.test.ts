import { describe, expect, it } from 'vitest';
import type { DeviceSpec, LinkCost, LinkOption, RemoteBox } from '../api/types';
import { boxLabel, lentBox, lentModelName, linkLine, newBox, rigRequest } from './boxes';

const link = { name: '2.5 GbE', throughput_bytes_per_s: 293_750_000, latency_s: 0.00012 };
const box: RemoteBox = {
  name: 'box 2 · 2x3090',
  endpoint: 'box2:50052',
  link,
  devices: [
    { kind: 'rpc', index: 0 },
    { kind: 'rpc', index: 1 },
  ],
};
const links: LinkOption[] = [
  { id: '1gbe', link: { ...link, name: '1 GbE' } },
  { id: '2.5gbe', link },
];

describe('rigs of several boxes', () => {
  it('asks for a preset alone as its id, and with other boxes as {preset, also}', () => {
    expect(rigRequest('4x3090', [])).toBe('4x3090');
    const also = [{ preset: '2x3090', link: '2.5gbe' }];
    expect(rigRequest('live', also)).toEqual({ preset: 'live', also });
    expect((rigRequest('live', also) as { also: unknown[] }).also[0]).not.toBe(also[0]);
  });

  it('adds a 2×3090 box over 2.5 GbE when there are such, else the first of each', () => {
    expect(newBox(['4x3090', '2x3090'], links)).toEqual({ preset: '2x3090', link: '2.5gbe' });
    expect(newBox(['4x3090'], links.slice(0, 1))).toEqual({ preset: '4x3090', link: '1gbe' });
    expect(newBox([], links)).toBeNull();
    expect(newBox(['4x3090'], [])).toBeNull();
  });

  it('names a lent device by its box and its card', () => {
    expect(lentBox({ kind: 'rpc', index: 1 }, [box])).toBe(box);
    expect(lentBox({ kind: 'rpc', index: 2 }, [box])).toBeNull();
    expect(lentBox({ kind: 'gpu', index: 1 }, [box])).toBeNull();
    expect(boxLabel(box)).toBe('box 2 · 2x3090 over 2.5 GbE');
    const spec = { name: 'RPC1 · GPU 1 · RTX 3090 · on box 2 · 2x3090 over 2.5 GbE' } as DeviceSpec;
    expect(lentModelName(spec)).toBe('RTX 3090');
    const cpu = { name: 'RPC2 · CPU RAM · Core i5-1235U · on box 3 · cpu-minipc over 1 GbE' } as DeviceSpec;
    expect(lentModelName(cpu)).toBe('Core i5-1235U');
  });

  it('says what a link costs a token and the load', () => {
    const cost: LinkCost = {
      box_name: 'box 2 · 2x3090',
      link,
      crossings_per_token: 2,
      bytes_per_token: 49_152,
      seconds_per_token: 0.000407,
      load_bytes: 40 * 1024 ** 3,
      load_seconds: 146.2,
    };
    expect(linkLine(cost)).toBe('box 2 · 2x3090 over 2.5 GbE: 2 crossings a token, 0.41 ms; loading sends 40.0 GiB, 146 s');
    expect(linkLine({ ...cost, crossings_per_token: 1, load_bytes: 0 })).toBe('box 2 · 2x3090 over 2.5 GbE: 1 crossing a token, 0.41 ms');
  });
});

describe('lent device keys', () => {
  it('round-trip as rpc-N columns labelled RPC N', async () => {
    const { deviceKey, parseDeviceKey, shortLabel, bufferName, isLentKey, sameDevice, gpuIndex } = await import('./devices');
    expect(deviceKey({ kind: 'rpc', index: 1 })).toBe('rpc-1');
    expect(parseDeviceKey('rpc-1')).toEqual({ kind: 'rpc', index: 1 });
    expect(shortLabel('rpc-1')).toBe('RPC 1');
    expect(bufferName({ kind: 'rpc', index: 1 })).toBe('RPC1');
    expect(isLentKey('rpc-0') && !isLentKey('gpu-0')).toBe(true);
    expect(gpuIndex('rpc-1')).toBeNull();
    expect(sameDevice({ kind: 'rpc', index: 1 }, { kind: 'gpu', index: 1 })).toBe(false);
  });
});
