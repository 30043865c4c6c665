-- pgbench: one like of one hot article (content 7) by a member out of
-- 1..10000000, as redis-benchmark's -r 10000000 draws them for tally and
-- Redis (see docs/BENCHMARKS.md, like-hot-p16).
\set member random(1, 10000000)
SELECT like_add(7, :member);
