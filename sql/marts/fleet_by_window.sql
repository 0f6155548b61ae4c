-- Fleet goodput per event-time window (an hour by default), cluster and
-- accelerator on the capacity base: fleet_daily at window grain, for the
-- trend within a day. Like fleet_daily it counts only windows whose capacity
-- covers the chips held (cluster_window; the others are in capacity_gaps).
create or replace view fleet_by_window as
with

windows as (
    select * from cluster_window
    where capacity_status = 'ok'
),

final as (
    select
        window_start,
        day,
        cluster,
        accelerator,
        capacity_chip_s,
        held_chip_s,
        all_allocated_chip_s,
        productive_chip_s,
        ideal_chip_s,
        profiled_productive_chip_s,
        runtime_measured_chip_s,
        -- held <= capacity in every counted window: the clamp only absorbs float rounding.
        greatest(capacity_chip_s - held_chip_s, 0) as idle_capacity_chip_s,
        unnest(goodput_factors(all_allocated_chip_s, productive_chip_s, ideal_chip_s,
                               profiled_productive_chip_s, capacity_chip_s, runtime_measured_chip_s))
    from windows
)

select * from final
