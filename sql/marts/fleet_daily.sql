-- Fleet goodput per day, cluster and accelerator on the capacity base: SG is
-- all-allocated chip-time over chips online, so idle capacity counts against it.
-- Only windows whose capacity covers the chips held count (see cluster_window);
-- the others are counted in `excluded_windows` and listed in capacity_gaps.
create or replace view fleet_daily as
with

windows as (
    select * from cluster_window
),

counted as (
    select
        day,
        cluster,
        accelerator,
        sum(capacity_chip_s) as capacity_chip_s,
        sum(held_chip_s) as held_chip_s,
        sum(all_allocated_chip_s) as all_allocated_chip_s,
        sum(productive_chip_s) as productive_chip_s,
        sum(ideal_chip_s) as ideal_chip_s,
        sum(profiled_productive_chip_s) as profiled_productive_chip_s,
        sum(runtime_measured_chip_s) as runtime_measured_chip_s
    from windows
    where capacity_status = 'ok'
    group by all
),

excluded as (
    select
        day,
        cluster,
        accelerator,
        count(*) as excluded_windows,
        sum(held_chip_s) as excluded_held_chip_s
    from windows
    where capacity_status != 'ok'
    group by all
),

joined as (
    select
        day,
        cluster,
        accelerator,
        coalesce(counted.capacity_chip_s, 0) as capacity_chip_s,
        coalesce(counted.held_chip_s, 0) as held_chip_s,
        coalesce(counted.all_allocated_chip_s, 0) as all_allocated_chip_s,
        coalesce(counted.productive_chip_s, 0) as productive_chip_s,
        counted.ideal_chip_s,
        coalesce(counted.profiled_productive_chip_s, 0) as profiled_productive_chip_s,
        coalesce(counted.runtime_measured_chip_s, 0) as runtime_measured_chip_s,
        coalesce(excluded.excluded_windows, 0) as excluded_windows,
        coalesce(excluded.excluded_held_chip_s, 0) as excluded_held_chip_s
    from counted
    full outer join excluded using (day, cluster, accelerator)
),

final as (
    select
        *,
        -- held <= capacity in every counted window: the clamp only absorbs
        -- float rounding between the two sums.
        greatest(capacity_chip_s - held_chip_s, 0) as idle_capacity_chip_s,
        unnest(goodput_factors(all_allocated_chip_s, productive_chip_s, ideal_chip_s,
                               profiled_productive_chip_s, capacity_chip_s, runtime_measured_chip_s))
    from joined
)

select * from final
