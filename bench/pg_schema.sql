-- PostgreSQL side of the like workload: dedupe on (content, member), keep
-- when, and count per content. Default server settings: fsync on,
-- synchronous_commit on (an acknowledged like is durable, as in tally).
CREATE TABLE likes (
	content bigint NOT NULL,
	member bigint NOT NULL,
	ts timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (content, member)
);
CREATE TABLE counts (
	content bigint PRIMARY KEY,
	n bigint NOT NULL
);
CREATE FUNCTION like_add(c bigint, m bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
	r bigint;
BEGIN
	INSERT INTO likes (content, member) VALUES (c, m) ON CONFLICT DO NOTHING;
	IF FOUND THEN
		INSERT INTO counts (content, n) VALUES (c, 1)
		ON CONFLICT (content) DO UPDATE SET n = counts.n + 1
		RETURNING n INTO r;
		RETURN r;
	END IF;
	SELECT n INTO r FROM counts WHERE content = c;
	RETURN r;
END $$;
