-- Per UTC day, cluster, ClusterQueue and accelerator: its nominal quota × time,
-- the chips its admitted Workloads used and borrowed from its cohort × time as
-- its status said them (Kueue's own figures, at each status the watch saw),
-- and beside them the chip-time its jobs held (job_window_enriched): the
-- question a Kueue operator asks of quota, "is this queue living on borrowed
-- chips, or leaving its own idle?". Flavors of one accelerator are summed.
-- docs/kubernetes.md, "Quotas and borrowing", says where these differ from
-- Kueue's metrics.
create or replace view kueue_quota_daily as
with

day_us as (
    select 86400000000::bigint as us
),

stretches as (
    select
        cluster,
        name as cluster_queue,
        cohort,
        accelerator,
        nominal_chips,
        usage_chips,
        borrowed_chips,
        epoch_us(start_time) as start_us,
        epoch_us(end_time) as end_us
    from queue_quota_levels
    where kind = 'ClusterQueue' and end_time > start_time
),

pieces as (
    select
        stretches.*,
        unnest(range(start_us - start_us % day_us.us, end_us, day_us.us)) as day_start_us,
        day_us.us as day_length_us
    from stretches
    cross join day_us
),

cut as (
    select
        cast(make_timestamp(day_start_us) as date) as day,
        cluster,
        cluster_queue,
        cohort,
        accelerator,
        nominal_chips,
        usage_chips,
        borrowed_chips,
        least(end_us, day_start_us + day_length_us) - greatest(start_us, day_start_us) as piece_us
    from pieces
),

quota as (
    select
        day,
        cluster,
        cluster_queue,
        accelerator,
        string_agg(distinct cohort, ', ' order by cohort) as cohort,
        sum(nominal_chips * piece_us) / 1e6 as nominal_chip_s,
        sum(usage_chips * piece_us) filter (where usage_chips is not null) / 1e6 as used_chip_s,
        sum(borrowed_chips * piece_us) filter (where borrowed_chips is not null) / 1e6 as borrowed_chip_s,
        sum(piece_us) filter (where usage_chips is not null) / 1e6 as status_known_s
    from cut
    group by all
),

held as (
    select day, cluster, cluster_queue, accelerator, sum(held_chip_s) as held_chip_s
    from job_window_enriched
    group by all
),

final as (
    select
        quota.*,
        coalesce(held.held_chip_s, 0) as held_chip_s
    from quota
    left join held using (day, cluster, cluster_queue, accelerator)
)

select * from final
