-- A fenced write heartbeats its jobs as it commits (issue 38).
--
-- The comments of sql/0009 say that a job row skipped by the heartbeat and the sweep, because a
-- write in flight holds it, is heartbeated by the fence "when it commits". It was not: the fence
-- beat the job when the write began, so a write that then waited on a row (up to the store's
-- lock_timeout) committed a heartbeat as old as its wait, and with a TTL under about 5 s a claim
-- right after the commit swept the live lease. Since this change the write's last statement,
-- before its commit, beats its jobs (beat_at_commit in sql/queries/fence.sql); no schema change
-- was needed. 0009 is applied and checksummed, so its text stays; the functions' comments say
-- what is true now.
COMMENT ON FUNCTION heartbeat_processing_lock(uuid) IS
    'One lease''s heartbeat, that never waits: a row locked by its holder''s fenced write is skipped '
    'and counted alive; the write beats it as it commits (beat_at_commit, sql/queries/fence.sql).';
COMMENT ON FUNCTION release_stale_locks(uuid, interval) IS
    'The sweep, that never waits on a live holder: a job row locked by a fenced write is skipped; '
    'the write beats it as it commits (beat_at_commit, sql/queries/fence.sql).';
COMMENT ON FUNCTION fence_jobs(uuid[]) IS
    'The fence of a write: locks the invoice rows, then the job rows, beats a heartbeat older than '
    'a second, returns the jobs still running. The write beats them again as it commits (beat_at_commit).';
