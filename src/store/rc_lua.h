/* rc_lua.h: the Lua scripts of the redis-cluster store. Every write runs as
 * one of them so that it is atomic on its node and guarded by a token key in
 * the same slot: a resend after a timeout finds the token and answers with
 * the saved result instead of applying the write a second time.
 *
 * Lua numbers are doubles, so no script does int64 arithmetic itself: Redis
 * does it (INCRBY refuses to overflow) and values travel as strings.
 *
 * A token found is written again, unchanged (SET ... KEEPTTL), before its
 * answer: WAIT waits for the client's own earlier writes, and a run that
 * only read would leave the write the token stands for outside the WAIT
 * that acknowledges it (--redis-wait: the first run may be on the master
 * alone). */
#ifndef TALLY_RC_LUA_H
#define TALLY_RC_LUA_H

/* Add deltas in order to one integer key (a counter shard or an object
 * total), each refused alone if it would overflow ("E").
 * KEYS[1] value key, KEYS[2] token key, KEYS[3] (optional) the counter's
 * shard-count key, in the same slot (only shard 0 shares it).
 * ARGV[1] token ttl s, ARGV[2] the run's batch ("instance:batch"),
 * ARGV[3] the deltas' sum or "", ARGV[4..] the deltas run-length coded:
 * delta, how many times in a row.
 * With a sum (tallyd sends one only when no two deltas have opposite
 * signs, so every value between the first and the last is passed on the
 * way and none can overflow unless the last does) one INCRBY adds it and
 * the reply is "n|=v", v the value after the last delta: the master's work
 * is per batch, not per delta. Without a sum, or when its INCRBY is refused
 * (it then changed nothing), each delta is added alone and the reply is
 * "n|v1,v2,..." with "E" for a refused one ("C" when the value is not
 * tally's: not an integer, a key of another type); once a delta is refused the
 * same delta right after it is refused too (the value did not move), so a
 * run stops at its first refusal.
 * n is the shard count read (1 without KEYS[3]); a token already there
 * returns its saved string after a "=", so a resend or a client retry
 * answers like the first run, changes nothing, and is told apart from a
 * first run (whose change the batch's other answers count). A run that changed nothing (every delta
 * refused) saves its answer marked with its batch, "R<batch>|answer": a
 * resend of that batch (its reply lost) gets the same refusal, as the
 * writes after it in the batch were made on top of it, while a client's
 * retry, in another batch, runs anew, as on the rocksdb store, which keeps
 * a client's token only for a write made. */
#define RC_LUA_ADD \
"local t = redis.call('GET', KEYS[2])\n" \
"if t then\n" \
"  if string.sub(t, 1, 1) ~= 'R' then\n" \
"    redis.call('SET', KEYS[2], t, 'KEEPTTL'); return '=' .. t end\n" \
"  local bar = string.find(t, '|', 1, true)\n" \
"  if string.sub(t, 2, bar - 1) == ARGV[2] then\n" \
"    return string.sub(t, bar + 1) end\n" \
"end\n" \
"local n = '1'\n" \
"if KEYS[3] then n = redis.call('GET', KEYS[3]) or '1' end\n" \
"local s\n" \
"local made = false\n" \
"if ARGV[3] ~= '' then\n" \
"  local r = redis.pcall('INCRBY', KEYS[1], ARGV[3])\n" \
"  if not (type(r) == 'table' and r.err) then\n" \
"    made = true\n" \
"    s = n .. '|=' .. redis.call('GET', KEYS[1]) end\n" \
"end\n" \
"if not s then\n" \
"  local out = {}\n" \
"  for i = 4, #ARGV, 2 do\n" \
"    local e = false\n" \
"    local m = 'E'\n" \
"    for j = 1, tonumber(ARGV[i + 1]) do\n" \
"      if not e then\n" \
"        local r = redis.pcall('INCRBY', KEYS[1], ARGV[i])\n" \
"        e = type(r) == 'table' and r.err ~= nil\n" \
"        if e and not string.find(r.err, 'overflow', 1, true) then\n" \
"          m = 'C' end\n" \
"      end\n" \
"      if e then out[#out + 1] = m\n" \
"      else made = true; out[#out + 1] = redis.call('GET', KEYS[1]) end\n" \
"    end\n" \
"  end\n" \
"  s = n .. '|' .. table.concat(out, ',')\n" \
"end\n" \
"if made then redis.call('SET', KEYS[2], s, 'EX', ARGV[1])\n" \
"else redis.call('SET', KEYS[2], 'R' .. ARGV[2] .. '|' .. s, 'EX', ARGV[1]) end\n" \
"return s\n"

/* SET or DEL of a named counter, allowed only while it has one shard: the
 * shard-count key and shard 0 share a slot, so the check and the write are
 * one atomic step even when another tallyd grows the shards.
 * KEYS[1] shard 0, KEYS[2] shard-count key, KEYS[3] token key.
 * ARGV[1] ttl s, ARGV[2] "s" or "d", ARGV[3] value (SET).
 * Returns the value (SET) or "1"/"0" (DEL: existed), or "S" when the
 * counter has more than one shard (nothing changed). */
#define RC_LUA_SETDEL \
"local t = redis.call('GET', KEYS[3])\n" \
"if t then redis.call('SET', KEYS[3], t, 'KEEPTTL'); return t end\n" \
"local r\n" \
"if tonumber(redis.call('GET', KEYS[2]) or '1') > 1 then r = 'S'\n" \
"elseif ARGV[2] == 's' then redis.call('SET', KEYS[1], ARGV[3]); r = ARGV[3]\n" \
"else r = tostring(redis.call('DEL', KEYS[1])) end\n" \
"redis.call('SET', KEYS[3], r, 'EX', ARGV[1])\n" \
"return r\n"

/* Put a member in (HSETNX) or take it out (HDEL) of its sub-hash.
 * KEYS[1] sub-hash, KEYS[2] token key (same slot).
 * ARGV[1] ttl s, ARGV[2] member, ARGV[3] at_ms, ARGV[4] "a" or "r".
 * Returns "1" changed or "0" not; a token already there returns its saved
 * answer prefixed with "=" (the change was made once, earlier). */
#define RC_LUA_MEMBER \
"local t = redis.call('GET', KEYS[2])\n" \
"if t then redis.call('SET', KEYS[2], t, 'KEEPTTL'); return '=' .. t end\n" \
"local c\n" \
"if ARGV[4] == 'a' then c = redis.call('HSETNX', KEYS[1], ARGV[2], ARGV[3])\n" \
"else c = redis.call('HDEL', KEYS[1], ARGV[2]) end\n" \
"redis.call('SET', KEYS[2], tostring(c), 'EX', ARGV[1])\n" \
"return tostring(c)\n"

/* Append an entry to a capped log (recent actors of an object, or a
 * member's history), numbered by the log's own sequence key.
 * KEYS[1] list, KEYS[2] sequence key, KEYS[3] token key (same slot).
 * ARGV[1] ttl s, ARGV[2] cap, ARGV[3] entry (without its number).
 * Returns the entry's number, or 0 when the token was there already. */
#define RC_LUA_LOG \
"if not redis.call('SET', KEYS[3], '1', 'NX', 'EX', ARGV[1]) then\n" \
"  redis.call('SET', KEYS[3], '1', 'KEEPTTL'); return 0 end\n" \
"local q = redis.call('INCR', KEYS[2])\n" \
"redis.call('LPUSH', KEYS[1], q .. ':' .. ARGV[3])\n" \
"redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)\n" \
"return q\n"

/* Grow a counter's shard count, never shrink it.
 * KEYS[1] shard-count key. ARGV[1] wanted count. Returns the count now. */
#define RC_LUA_GROW \
"local c = tonumber(redis.call('GET', KEYS[1]) or '1')\n" \
"local w = tonumber(ARGV[1])\n" \
"if w > c then redis.call('SET', KEYS[1], ARGV[1]); c = w end\n" \
"return c\n"

/* Add a counting type to the shared schema, unless another instance
 * gave its name another mode: ids are each instance's own (keys hold
 * names), modes are not, and two modes under one name would keep a
 * unique type's memberships on one instance and a total on another.
 * KEYS[1] the schema hash. ARGV[1] this instance's id, ARGV[2] name,
 * ARGV[3] mode; the field "k:ID" holds "mode:name", under this
 * instance's id or, when that is another name's, the next free one (so
 * that other instances find the name at their start). Returns "N"
 * (added), "S" (the name is there with this mode, under any id) or "M"
 * (the name is there with the other mode: nothing changed). */
#define RC_LUA_TYPE \
"local all = redis.call('HGETALL', KEYS[1])\n" \
"for i = 1, #all, 2 do\n" \
"  if string.sub(all[i], 1, 2) == 'k:' then\n" \
"    local m, n = string.match(all[i + 1], '^(%d+):(.*)$')\n" \
"    if n == ARGV[2] then\n" \
"      if m == ARGV[3] then return 'S' end\n" \
"      return 'M'\n" \
"    end\n" \
"  end\n" \
"end\n" \
"local v = ARGV[3] .. ':' .. ARGV[2]\n" \
"local id = tonumber(ARGV[1])\n" \
"for i = 1, 65535 do\n" \
"  if redis.call('HSETNX', KEYS[1], 'k:' .. id, v) == 1 then\n" \
"    return 'N'\n" \
"  end\n" \
"  id = id % 65535 + 1\n" \
"end\n" \
"return redis.error_reply('ERR no free counting type id')\n"

/* Add a content type's name to the shared schema, where other instances
 * find it (at their start, and when they read a name they do not know).
 * Ids are each instance's own (keys hold names), so the id only has to be
 * a free field: when this instance's id is another name's, the next free
 * one is taken, so that the name is never lost to a race.
 * KEYS[1] the schema hash. ARGV[1] this instance's id, ARGV[2] the name.
 * Returns the id the name is under. */
#define RC_LUA_CTYPE \
"local id = tonumber(ARGV[1])\n" \
"for i = 1, 65535 do\n" \
"  local cur = redis.call('HGET', KEYS[1], 'c:' .. id)\n" \
"  if not cur then\n" \
"    redis.call('HSET', KEYS[1], 'c:' .. id, ARGV[2])\n" \
"    return id\n" \
"  end\n" \
"  if cur == ARGV[2] then return id end\n" \
"  id = id % 65535 + 1\n" \
"end\n" \
"return redis.error_reply('ERR no free content type id')\n"

enum rc_script {
	RC_S_ADD = 0,
	RC_S_SETDEL,
	RC_S_MEMBER,
	RC_S_LOG,
	RC_S_GROW,
	RC_S_TYPE,
	RC_S_CTYPE,
	RC_S_COUNT
};

#endif
