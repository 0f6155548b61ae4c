-- Interruptions per UTC day, queue (a Slurm partition, a Kueue queue path) and
-- its first level (cluster_queue: a Kueue ClusterQueue), and cause, as an
-- operator reads a queue's health: how many, of how many jobs, how long the
-- attempts had run, and how long the jobs took to restart (until they held all
-- their chips again, or resumed work with a runtime stream): mean, median and
-- 90th percentile over the interruptions that did restart; and the chip-hours
-- they cost (docs/metric.md, "Why jobs stopped").
create or replace view interruptions_by_queue as
with

cuts as (
    select
        interruptions.*,
        attributes.cluster_queue,
        coalesce(interruptions.recovered_s, interruptions.reallocated_s) as restart_s
    from interruptions
    join job_attributes as attributes using (job_id)
),

final as (
    select
        day,
        cluster,
        coalesce(queue, 'UNKNOWN') as queue,
        cluster_queue,
        cause,
        count(*) as interruptions,
        count(distinct job_id) as jobs,
        avg(run_s) as mean_run_s,
        count(restart_s) as restarts,
        avg(restart_s) as mean_restart_s,
        quantile_cont(restart_s, 0.5) as p50_restart_s,
        quantile_cont(restart_s, 0.9) as p90_restart_s,
        sum(cost_chip_s) / 3600 as cost_chip_h
    from cuts
    group by all
)

select * from final
