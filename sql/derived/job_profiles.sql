-- One row per job: whether PG measures it. A job is profiled when it has a
-- profiler sample and its PG is not set aside (pg_set_aside); `pg_caveat`
-- says why a job with samples is not. Every view reads a job's ideal and
-- profiled productive chip-time through this, so a set-aside job is counted
-- as unprofiled everywhere alike.
create or replace view job_profiles as
with

job_rows as (
    select job_id, profiler_samples from jobs
),

set_aside as (
    select job_id, reason from pg_set_aside
),

final as (
    select
        job_rows.job_id,
        job_rows.profiler_samples > 0 and set_aside.job_id is null as profiled,
        set_aside.reason as pg_caveat
    from job_rows
    left join set_aside on job_rows.job_id = set_aside.job_id
)

select * from final
