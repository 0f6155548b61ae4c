-- One row per job: whether PG measures it, and whether its runtime was measured
-- at all. A job is profiled when it has a profiler sample and its PG is not set
-- aside (pg_set_aside); `pg_caveat` says why a job with samples is not. A job's
-- runtime is measured when any runtime span of its counts (a category other
-- than idle, or runtime time clipped outside its allocation): a job seen by a
-- scheduler alone (Slurm or Kubernetes without training logs) reported nothing,
-- so its held time is "runtime not measured", not idle (docs/metric.md section
-- 1, "Unknown and empty factors"). Every view reads a job's ideal, profiled
-- productive and measured time through this, so each job counts alike everywhere.
create or replace view job_profiles as
with

job_rows as (
    select job_id, profiler_samples from jobs
),

set_aside as (
    select job_id, reason from pg_set_aside
),

measured as (
    select
        job_id,
        sum(productive_chip_s + pending_chip_s + lost_chip_s + data_wait_chip_s + compile_chip_s
            + checkpoint_save_chip_s + checkpoint_restore_chip_s + init_chip_s + clipped_runtime_chip_s) > 0
            as runtime_measured
    from job_window
    group by job_id
),

final as (
    select
        job_rows.job_id,
        job_rows.profiler_samples > 0 and set_aside.job_id is null as profiled,
        set_aside.reason as pg_caveat,
        coalesce(measured.runtime_measured, false) as runtime_measured
    from job_rows
    left join set_aside on job_rows.job_id = set_aside.job_id
    left join measured on job_rows.job_id = measured.job_id
)

select * from final
