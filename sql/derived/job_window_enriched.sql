-- One row per job and window with the job's attributes and size class: the
-- base every mart aggregates.
create or replace view job_window_enriched as
with

windows as (
    select * from job_window
),

job_rows as (
    select * from jobs
),

classes as (
    select * from size_classes
),

final as (
    select
        windows.date as day,
        windows.window_start,
        windows.job_id,
        job_rows.cluster,
        job_rows.accelerator,
        coalesce(job_rows.workload, 'UNKNOWN') as workload,
        coalesce(job_rows.team, 'UNKNOWN') as team,
        coalesce(job_rows.framework, 'UNKNOWN') as framework,
        classes.size_class,
        job_rows.requested_chips,
        job_rows.status,
        windows.* exclude (date, window_start, job_id, version)
    from windows
    join job_rows using (job_id)
    join classes
        on job_rows.requested_chips between classes.min_chips and classes.max_chips
)

select * from final
