-- pgbench: one like, content and member drawn like redis-benchmark's
-- -r 100000: content 0..99999, member 1..100000 (see docs/BENCHMARKS.md).
\set content random(0, 99999)
\set member random(1, 100000)
SELECT like_add(:content, :member);
