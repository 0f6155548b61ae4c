-- Fleet goodput per event-time window (an hour by default), cluster and
-- accelerator on the capacity base: fleet_daily at window grain, for the
-- trend within a day.
create or replace view fleet_by_window as
with

capacity as (
    select window_start, date as day, cluster, accelerator, sum(capacity_chip_s) as capacity_chip_s
    from capacity_window
    group by all
),

usage as (
    select
        window_start,
        day,
        cluster,
        accelerator,
        sum(held_chip_s) as held_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s
    from job_window_enriched
    group by all
),

joined as (
    select
        window_start,
        day,
        cluster,
        accelerator,
        coalesce(capacity.capacity_chip_s, 0) as capacity_chip_s,
        coalesce(usage.held_chip_s, 0) as held_chip_s,
        coalesce(usage.all_allocated_chip_s, 0) as all_allocated_chip_s,
        coalesce(usage.productive_chip_s, 0) as productive_chip_s,
        coalesce(usage.ideal_chip_s, 0) as ideal_chip_s,
        coalesce(usage.profiled_productive_chip_s, 0) as profiled_productive_chip_s
    from capacity
    full outer join usage using (window_start, day, cluster, accelerator)
),

final as (
    select
        *,
        capacity_chip_s - held_chip_s as idle_capacity_chip_s,
        unnest(goodput_factors(all_allocated_chip_s, productive_chip_s, ideal_chip_s,
                               profiled_productive_chip_s, capacity_chip_s))
    from joined
)

select * from final
