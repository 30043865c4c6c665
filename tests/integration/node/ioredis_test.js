// ioredis_test.js: tallyd through ioredis (a Node Redis client), with the
// client's defaults (no HELLO: RESP2; ready check through INFO).
//
//   node ioredis_test.js PORT [STORE]
//
// STORE is tallyd's store, rocksdb (default) or redis-cluster; the
// redis-cluster store refuses DBSIZE (it keeps no count of its counters).
//
// Prints "ok ..." / "FAIL ..." per check and "N passed, M failed"; exits 1
// on any failure.
'use strict';

const assert = require('node:assert/strict');
const Redis = require('ioredis');
const { ReplyError } = require('ioredis');

const port = Number(process.argv[2]);
const onCluster = process.argv[3] === 'redis-cluster';
let passed = 0;
let failed = 0;

async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}`);
    console.log(`       ${String(e && e.stack ? e.stack : e).split('\n').slice(0, 4).join('\n       ')}`);
  }
}

async function expectReplyError(promise, message) {
  let err = null;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `expected a ReplyError '${message}', got a reply`);
  assert.ok(err instanceof ReplyError, `expected ReplyError, got ${err && err.constructor && err.constructor.name}: ${err}`);
  assert.equal(err.message, message);
}

async function main() {
  if (!(port > 0)) {
    console.error('usage: node ioredis_test.js PORT');
    process.exit(2);
  }
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null, // a test never waits for reconnects
    connectTimeout: 10000,
    commandTimeout: 20000,
  });
  redis.on('error', (e) => console.log(`       (client error event: ${e.message})`));

  await check('connect with the defaults (ready check via INFO)', async () => {
    await redis.connect();
    assert.equal(redis.status, 'ready');
  });
  await check('PING', async () => {
    assert.equal(await redis.ping(), 'PONG');
  });
  await check('INCR, INCRBY, DECRBY, GET', async () => {
    assert.equal(await redis.incr('node:c'), 1);
    assert.equal(await redis.incrby('node:c', 41), 42);
    assert.equal(await redis.decrby('node:c', 2), 40);
    assert.equal(await redis.get('node:c'), '40');
  });
  await check('GET of a missing key is null (RESP2 nil)', async () => {
    assert.equal(await redis.get('node:missing'), null);
  });
  await check(`SET, MGET, EXISTS, DEL, DBSIZE${onCluster ? ' (refused)' : ''}`, async () => {
    assert.equal(await redis.set('node:s', 7), 'OK');
    assert.deepEqual(await redis.mget('node:c', 'node:missing', 'node:s'), ['40', null, '7']);
    assert.equal(await redis.exists('node:c', 'node:s', 'node:missing'), 2);
    assert.equal(await redis.del('node:s'), 1);
    if (onCluster)
      await expectReplyError(redis.dbsize(), 'ERR not supported by this store');
    else
      assert.equal(await redis.dbsize(), 1);
  });
  await check('1000 concurrent INCRs on one connection answer 1..1000 in order', async () => {
    const replies = await Promise.all(Array.from({ length: 1000 }, () => redis.incr('node:hot')));
    assert.deepEqual(replies, Array.from({ length: 1000 }, (_, i) => i + 1));
  });
  await check('a pipeline of 1000 TALLY.ADD via call', async () => {
    const p = redis.pipeline();
    for (let m = 1; m <= 1000; m++) p.call('TALLY.ADD', 'article', 'like', '1', String(m));
    const res = await p.exec();
    assert.equal(res.length, 1000);
    res.forEach(([err, count], i) => {
      assert.equal(err, null);
      assert.equal(count, i + 1);
    });
  });
  await check('TALLY.COUNT after the pipeline', async () => {
    assert.equal(await redis.call('TALLY.COUNT', 'article', 'like', '1'), 1000);
  });
  await check('a pipeline mixing writes and reads answers in order', async () => {
    const res = await redis.pipeline()
      .call('TALLY.REMOVE', 'article', 'like', '1', '1')
      .call('TALLY.COUNT', 'article', 'like', '1')
      .call('TALLY.HAS', 'article', 'like', '1', '1')
      .incr('node:c')
      .get('node:c')
      .call('TALLY.ADD', 'article', 'view', '1', '0', 'DELTA', '5')
      .exec();
    assert.deepEqual(res.map(([e, v]) => [e, v]), [
      [null, 999], [null, 999], [null, null], [null, 41], [null, '41'], [null, 5],
    ]);
  });
  await check('TALLY.HAS gives a time in ms', async () => {
    const at = await redis.call('TALLY.HAS', 'article', 'like', '1', '2');
    assert.equal(typeof at, 'number');
    assert.ok(Math.abs(at - Date.now()) < 600000, `at ${at} is not near now`);
  });
  await check('TALLY.MCOUNT is an array of integers', async () => {
    assert.deepEqual(await redis.call('TALLY.MCOUNT', 'article', 'like', '1', '2'), [999, 0]);
  });
  await check('TALLY.COUNTS without HELLO 3 is a flat array (RESP2)', async () => {
    const flat = await redis.call('TALLY.COUNTS', 'article', '1');
    assert.ok(Array.isArray(flat));
    assert.equal(flat.length % 2, 0);
    const m = {};
    for (let i = 0; i < flat.length; i += 2) m[flat[i]] = flat[i + 1];
    assert.equal(m.like, 999);
    assert.equal(m.view, 5);
  });
  await check('TALLY.RECENT entries: [member, at, op, seq], newest first', async () => {
    const recent = await redis.call('TALLY.RECENT', 'article', 'like', '1', 'LIMIT', '2');
    assert.equal(recent.length, 2);
    assert.equal(recent[0][0], 1);
    assert.equal(recent[0][2], 'remove');
    assert.equal(recent[1][0], 1000);
    assert.equal(recent[1][2], 'add');
    assert.ok(recent[0][3] > recent[1][3]);
  });
  await check('errors are ReplyErrors: not an integer', () =>
    expectReplyError(redis.incrby('node:c', 'abc'), 'ERR value is not an integer or out of range'));
  await check('errors are ReplyErrors: overflow', async () => {
    await redis.set('node:max', '9223372036854775807');
    await expectReplyError(redis.incr('node:max'), 'ERR increment or decrement would overflow');
  });
  await check('errors are ReplyErrors: DECRBY INT64_MIN', () =>
    expectReplyError(redis.decrby('node:c', '-9223372036854775808'), 'ERR decrement would overflow'));
  await check('errors are ReplyErrors: arity', () =>
    expectReplyError(redis.call('INCR'), "ERR wrong number of arguments for 'incr' command"));
  await check('errors are ReplyErrors: unknown command', () =>
    expectReplyError(redis.call('FOO', 'a', 'b'),
      "ERR unknown command 'FOO', with args beginning with: 'a' 'b' "));
  await check('errors are ReplyErrors: unknown counting type', () =>
    expectReplyError(redis.call('TALLY.COUNT', 'article', 'nosuch', '1'),
      "ERR unknown counting type 'nosuch'"));
  await check('an error inside a pipeline stays in its slot', async () => {
    const res = await redis.pipeline().incr('node:c').incrby('node:c', 'x').incr('node:c').exec();
    assert.equal(res[0][1], 42);
    assert.ok(res[1][0] instanceof ReplyError);
    assert.equal(res[2][1], 43);
  });
  await check('the connection is still usable after errors', async () => {
    assert.equal(await redis.get('node:c'), '43');
  });
  await check('QUIT', async () => {
    assert.equal(await redis.quit(), 'OK');
  });

  console.log(`\n${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.log(`FAIL unexpected: ${e && e.stack ? e.stack : e}`);
  console.log(`\n${passed} passed, ${failed + 1} failed`);
  process.exit(1);
});
