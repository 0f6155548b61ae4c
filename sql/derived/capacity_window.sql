-- One row per event-time window, cluster and accelerator: chips online × time,
-- cut at window edges from the stretches of one level that capacity_level
-- keeps. A level that held for years is one stored row, and its windows exist
-- only here, where a query reads them (docs/metric.md, "Time and the as-of
-- time"). Integer chip-microseconds are summed and divided once, so each
-- window's figure is exact, as the pipeline's own windows are. A window's
-- version is the latest that changed it: a run that extends a stretch
-- changes only its windows from where it ended before (`changed_from`); the
-- earlier ones read null, their version being in earlier Delta versions.
create or replace view capacity_window as
with

levels as (
    select * from capacity_level
),

grid as (
    select cast(value as bigint) * 1000000 as window_us from settings where setting = 'window_s'
),

stretches as (
    select
        levels.cluster,
        levels.accelerator,
        levels.chips,
        levels.version,
        epoch_us(levels.start_time) as start_us,
        epoch_us(levels.end_time) as end_us,
        epoch_us(levels.changed_from) as changed_from_us,
        grid.window_us
    from levels
    cross join grid
),

pieces as (
    select
        *,
        unnest(range(start_us - start_us % window_us, end_us, window_us)) as window_start_us
    from stretches
),

final as (
    select
        cluster,
        accelerator,
        make_timestamptz(window_start_us) as window_start,
        sum(chips * (least(end_us, window_start_us + window_us) - greatest(start_us, window_start_us))) / 1e6
            as capacity_chip_s,
        sum(least(end_us, window_start_us + window_us) - greatest(start_us, window_start_us)) / 1e6 as online_s,
        max(case when window_start_us + window_us > changed_from_us then version end) as version,
        cast(make_timestamp(window_start_us) as date) as date
    from pieces
    group by cluster, accelerator, window_start_us
)

select * from final
