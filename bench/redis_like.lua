-- A like in Redis, as an application would glue it together: dedupe the
-- member, and only when it is new count it and keep the last 20 members.
-- ARGV[1] = content (redis-benchmark's zero-padded __rand_int__, 0..99999),
-- ARGV[2] = member as 1__rand_int__ (1e12 + 0..r-1 for redis-benchmark's
-- -r r: tally refuses member 0), mapped back to 1..r and stored as an
-- integer. The content keeps
-- its zero padding in key names so that MGET like:__rand_int__ finds them
-- (7 bytes more per key name than unpadded).
-- Key names are built from ARGV because redis-benchmark can only put the
-- random number into arguments (fine on a single Redis, not on a cluster).
local c = ARGV[1]
local m = tonumber(ARGV[2]) % 1000000000000 + 1
if redis.call('SADD', 'likes:' .. c .. ':set', m) == 1 then
	local n = redis.call('INCR', 'like:' .. c)
	redis.call('LPUSH', 'likes:' .. c .. ':last', m)
	redis.call('LTRIM', 'likes:' .. c .. ':last', 0, 19)
	return n
end
return tonumber(redis.call('GET', 'like:' .. c) or 0)
