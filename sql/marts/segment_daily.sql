-- goodput_by_segment per UTC day: the demand-base sums and factors of each
-- segment of each dimension on each day. A period's figures are the sums of
-- its days through goodput_factors (ratios of sums, never means of days).
create or replace view segment_daily as
with

windows as (
    select * from job_window_enriched
),

tagged as (
    select 'workload' as dimension, workload as segment, * from windows
    union all select 'size_class', size_class, * from windows
    union all select 'accelerator', accelerator, * from windows
    union all select 'team', team, * from windows
    union all select 'framework', framework, * from windows
    union all select 'queue', queue, * from windows
    union all select 'cluster_queue', cluster_queue, * from windows
),

totals as (
    select
        day,
        dimension,
        segment,
        count(distinct job_id) as jobs,
        sum(lifetime_chip_s) as lifetime_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s,
        sum(runtime_measured_chip_s) as runtime_measured_chip_s
    from tagged
    group by all
),

final as (
    select
        *,
        unnest(goodput_factors(all_allocated_chip_s, productive_chip_s, ideal_chip_s,
                               profiled_productive_chip_s, lifetime_chip_s, runtime_measured_chip_s))
    from totals
)

select * from final
