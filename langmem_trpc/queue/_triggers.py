"""Two triggers on procrastinate's jobs table, created by `PostgresJobQueue.setup()`:

- a job that goes back to waiting (a retry, put back at shutdown or after its worker
  stalled, `jobs retry`) gives up its thread's queueing lock, so it never collides with
  the thread's next waiting job, which collects the later enqueues;
- a running job that ends while a job of the same lock (user) waits notifies the
  workers as a new job does: they fetch again only on a new job or their polling
  interval, so a user's next job would otherwise wait up to `poll_interval`.
"""

from __future__ import annotations

JOB_TRIGGERS = """
CREATE OR REPLACE FUNCTION langmem_procrastinate_requeued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.queueing_lock := NULL;
    RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION langmem_procrastinate_lock_released() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    payload text := json_build_object('type', 'job_inserted', 'job_id', OLD.id)::text;
BEGIN
    IF EXISTS (SELECT 1 FROM procrastinate_jobs WHERE lock = OLD.lock AND status = 'todo') THEN
        PERFORM pg_notify('procrastinate_queue_v1#' || OLD.queue_name, payload);
        PERFORM pg_notify('procrastinate_any_queue_v1', payload);
    END IF;
    RETURN NULL;
END $$;
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
        WHERE tgrelid = 'procrastinate_jobs'::regclass AND tgname = 'langmem_procrastinate_requeued') THEN
        CREATE TRIGGER langmem_procrastinate_requeued BEFORE UPDATE OF status ON procrastinate_jobs
            FOR EACH ROW WHEN (NEW.status = 'todo' AND OLD.status <> 'todo'
                AND NEW.queueing_lock IS NOT NULL)
            EXECUTE FUNCTION langmem_procrastinate_requeued();
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
        WHERE tgrelid = 'procrastinate_jobs'::regclass AND tgname = 'langmem_procrastinate_lock_released') THEN
        CREATE TRIGGER langmem_procrastinate_lock_released
            AFTER UPDATE OF status OR DELETE ON procrastinate_jobs
            FOR EACH ROW WHEN (OLD.status = 'doing' AND OLD.lock IS NOT NULL)
            EXECUTE FUNCTION langmem_procrastinate_lock_released();
    END IF;
END $$
"""
