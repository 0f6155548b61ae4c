-- One row per job: how long it waited to start, the one definition queue_waits
-- and the report's queue section read. A job starts when it first holds all its
-- requested chips (jobs.first_running_time, a Kueue admission); its wait runs
-- from its SUBMIT to then (null until it starts). `waiting`: still waiting at
-- the as-of time (PENDING, never started); `ended_unstarted`: ended without
-- ever starting (cancelled, or failed, while queued).
create or replace view job_waits as
with

attributes as (
    select * from job_attributes
),

starts as (
    select job_id, first_running_time from jobs
),

final as (
    select
        attributes.job_id,
        cast(timezone('UTC', attributes.submit_time) as date) as day,
        attributes.cluster,
        attributes.queue,
        attributes.cluster_queue,
        attributes.requested_chips,
        starts.first_running_time,
        (epoch_us(starts.first_running_time) - epoch_us(attributes.submit_time)) / 1e6 as wait_s,
        starts.first_running_time is null and attributes.end_time is null and attributes.status = 'PENDING'
            as waiting,
        starts.first_running_time is null and attributes.end_time is not null as ended_unstarted
    from attributes
    join starts using (job_id)
)

select * from final
