-- One row per job: the attributes the marts slice by, with the job's size
-- class and UNKNOWN where telemetry did not say. `queue` is the whole queue
-- path of the SUBMIT (parent queues first, '/'-separated); `cluster_queue` its
-- first level, the queue whose quota the job draws from (Kueue's ClusterQueue;
-- the queue itself when it has no parent). docs/kubernetes.md says why.
create or replace view job_attributes as
with

job_rows as (
    select * from jobs
),

classes as (
    select * from size_classes
),

final as (
    select
        job_rows.job_id,
        job_rows.cluster,
        job_rows.accelerator,
        coalesce(job_rows.workload, 'UNKNOWN') as workload,
        coalesce(job_rows.team, 'UNKNOWN') as team,
        coalesce(job_rows.framework, 'UNKNOWN') as framework,
        coalesce(job_rows.queue, 'UNKNOWN') as queue,
        coalesce(nullif(split_part(job_rows.queue, '/', 1), ''), 'UNKNOWN') as cluster_queue,
        classes.size_class,
        job_rows.requested_chips,
        job_rows.status,
        job_rows.submit_time,
        job_rows.end_time
    from job_rows
    join classes
        on job_rows.requested_chips between classes.min_chips and classes.max_chips
)

select * from final
