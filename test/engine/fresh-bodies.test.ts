import { expect, it } from 'vitest';
import { FreshBodies } from '../../src/engine/fresh-bodies.js';

const raw = (n: number) => Buffer.alloc(n, 1);

it('FreshBodies: bounded by raw bytes (oldest out first), each entry taken once, a body over 1/16 of the bound never kept', () => {
  const fresh = new FreshBodies(1600, () => true);
  for (let i = 0; i < 20; i++) fresh.put(`e${i}`, 'stripe', 'ep', 't', raw(100));
  expect(fresh.size).toBe(16); // 16 × 100 bytes
  expect(fresh.take('e3')).toBeUndefined(); // among the oldest, evicted
  expect(fresh.take('e19')?.length).toBe(100);
  expect(fresh.take('e19')).toBeUndefined(); // taken once
  fresh.put('big', 'stripe', 'ep', 't', raw(101));
  expect(fresh.take('big')).toBeUndefined();
  expect(fresh.size).toBe(15);
});

it('FreshBodies keeps only bodies a worker here would open, asking once per endpoint and type', () => {
  const asked: string[] = [];
  const fresh = new FreshBodies(1600, (_p, endpointId, type) => (asked.push(`${endpointId}/${type}`), type === 'read.me'));
  fresh.put('a', 'stripe', 'ep', 'read.me', raw(10));
  fresh.put('b', 'stripe', 'ep', 'ids.only', raw(10));
  fresh.put('c', 'stripe', 'ep', 'ids.only', raw(10));
  expect([fresh.take('a')?.length, fresh.take('b'), fresh.take('c')]).toEqual([10, undefined, undefined]);
  expect(asked).toEqual(['ep/read.me', 'ep/ids.only']);
});

it('FreshBodies: a taken body stays within the bound until given back; while workers hold it all, nothing new is kept', () => {
  const fresh = new FreshBodies(1600, () => true);
  for (let i = 0; i < 16; i++) fresh.put(`e${i}`, 'stripe', 'ep', 't', raw(100));
  for (let i = 0; i < 10; i++) expect(fresh.take(`e${i}`)).toBeDefined();
  expect(fresh.heldBytes).toBe(1600); // 6 kept + 10 lent
  fresh.put('n1', 'stripe', 'ep', 't', raw(100)); // evicts the oldest kept (e10), not a lent one
  expect(fresh.take('e10')).toBeUndefined();
  expect(fresh.take('n1')).toBeDefined();
  for (let i = 11; i < 16; i++) expect(fresh.take(`e${i}`)).toBeDefined();
  expect([fresh.size, fresh.heldBytes]).toEqual([0, 1600]); // all 16 lent
  fresh.put('n2', 'stripe', 'ep', 't', raw(100));
  expect(fresh.take('n2')).toBeUndefined(); // no room: the worker will read it from the store
  fresh.giveBack(300);
  fresh.put('n3', 'stripe', 'ep', 't', raw(100));
  expect(fresh.take('n3')?.length).toBe(100);
  expect(fresh.heldBytes).toBe(1400);
});

it('FreshBodies: a discarded entry (its accept was a duplicate or failed) frees its bytes at once, lending nothing', () => {
  const fresh = new FreshBodies(1600, () => true);
  for (let i = 0; i < 16; i++) {
    fresh.put(`dup${i}`, 'stripe', 'ep', 't', raw(100));
    fresh.discard(`dup${i}`);
  }
  expect([fresh.size, fresh.heldBytes]).toEqual([0, 0]);
  fresh.put('next', 'stripe', 'ep', 't', raw(100)); // still kept: the bound is not spent
  expect(fresh.take('next')?.length).toBe(100);
});
