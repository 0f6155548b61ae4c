-- Interruptions per UTC day, cluster, accelerator, team, queue (a Slurm
-- partition, a Kueue queue path) and cause: how
-- many, of how many jobs, how long the attempts ran before (mean_run_s: the
-- mean time between a job getting all its chips and the interruption), how
-- long jobs took to hold all their chips again and to resume work (means
-- over the interruptions that did), and the chip-hours each cause cost
-- (docs/metric.md, "Why jobs stopped").
create or replace view interruptions_by_cause as
select
    day,
    cluster,
    accelerator,
    team,
    queue,
    cause,
    count(*) as interruptions,
    count(distinct job_id) as jobs,
    avg(run_s) as mean_run_s,
    avg(reallocated_s) as mean_reallocated_s,
    avg(recovered_s) as mean_recovered_s,
    sum(lost_chip_s) / 3600 as lost_chip_h,
    sum(recovery_chip_s) / 3600 as recovery_chip_h,
    sum(cost_chip_s) / 3600 as cost_chip_h
from interruptions
group by all
