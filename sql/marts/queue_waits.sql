-- How long jobs waited to start, per UTC day of their SUBMIT, cluster, queue
-- (a Slurm partition, a Kueue LocalQueue path) and its first level
-- (cluster_queue: a Kueue ClusterQueue): the question a Slurm admin compares
-- with sreport and a Kueue operator asks first (admission wait). A job starts
-- when it first holds all its requested chips (jobs.first_running_time, a
-- Kueue admission); its wait is the time from its SUBMIT to then. The mean,
-- median and 90th percentile (interpolated) are over the jobs that started;
-- `waiting` are those still waiting at the as-of time (PENDING, never started),
-- and `ended_unstarted` those that ended without ever starting (a cancel while
-- queued).
create or replace view queue_waits as
with

job_rows as (
    select
        attributes.*,
        jobs.first_running_time,
        cast(timezone('UTC', attributes.submit_time) as date) as day,
        epoch_us(jobs.first_running_time) - epoch_us(attributes.submit_time) as wait_us
    from job_attributes as attributes
    join jobs using (job_id)
),

final as (
    select
        day,
        cluster,
        queue,
        cluster_queue,
        count(*) as submitted,
        count(first_running_time) as started,
        avg(wait_us) / 1e6 as mean_wait_s,
        quantile_cont(wait_us, 0.5) / 1e6 as p50_wait_s,
        quantile_cont(wait_us, 0.9) / 1e6 as p90_wait_s,
        max(wait_us) / 1e6 as max_wait_s,
        count(*) filter (where first_running_time is null and end_time is null and status = 'PENDING') as waiting,
        coalesce(sum(requested_chips) filter (
            where first_running_time is null and end_time is null and status = 'PENDING'), 0) as waiting_chips,
        count(*) filter (where first_running_time is null and end_time is not null) as ended_unstarted
    from job_rows
    group by all
)

select * from final
