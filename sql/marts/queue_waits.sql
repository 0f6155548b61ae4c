-- How long jobs waited to start, per UTC day of their SUBMIT, cluster, queue
-- (a Slurm partition, a Kueue LocalQueue path) and its first level
-- (cluster_queue: a Kueue ClusterQueue): the question a Slurm admin compares
-- with sreport and a Kueue operator asks first (admission wait). Each job's
-- wait is job_waits'; the mean, median and 90th percentile (interpolated) are
-- over the jobs that started.
create or replace view queue_waits as
select
    day,
    cluster,
    queue,
    cluster_queue,
    count(*) as submitted,
    count(first_running_time) as started,
    avg(wait_s) as mean_wait_s,
    quantile_cont(wait_s, 0.5) as p50_wait_s,
    quantile_cont(wait_s, 0.9) as p90_wait_s,
    max(wait_s) as max_wait_s,
    count(*) filter (where waiting) as waiting,
    coalesce(sum(requested_chips) filter (where waiting), 0) as waiting_chips,
    count(*) filter (where ended_unstarted) as ended_unstarted
from job_waits
group by all
