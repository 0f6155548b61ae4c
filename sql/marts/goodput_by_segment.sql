-- Goodput per segment of jobs on the demand base (requested chips x lifetime),
-- for each dimension people slice by, over the whole output: segment_daily's
-- days summed, with each job counted once however many days it spans. The
-- goodput_by_<dimension> views are this one filtered to a dimension.
create or replace view goodput_by_segment as
with

days as (
    select * from segment_daily
),

job_segments as (
    unpivot (select distinct job_id, workload, size_class, accelerator, team, framework, queue, cluster_queue
             from job_window_enriched)
    on workload, size_class, accelerator, team, framework, queue, cluster_queue
    into name dimension value segment
),

job_counts as (
    select dimension, segment, count(*) as jobs
    from job_segments
    group by all
),

totals as (
    select
        dimension,
        segment,
        sum(lifetime_chip_s) as lifetime_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s,
        sum(runtime_measured_chip_s) as runtime_measured_chip_s
    from days
    group by all
),

final as (
    select
        totals.dimension,
        totals.segment,
        job_counts.jobs,
        totals.* exclude (dimension, segment),
        unnest(goodput_factors(totals.all_allocated_chip_s, totals.productive_chip_s, totals.ideal_chip_s,
                               totals.profiled_productive_chip_s, totals.lifetime_chip_s, totals.runtime_measured_chip_s))
    from totals
    join job_counts using (dimension, segment)
)

select * from final
