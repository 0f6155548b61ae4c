-- Per UTC day, cluster and queue (a Slurm partition, a Kueue LocalQueue path):
-- how long the jobs submitted that day waited to start (queue_waits' figures),
-- and the chip-time the queue's jobs held that day split by how the job ended
-- (its status at its end, or at the as-of time), beside the chip-time they
-- waited holding nothing. What a Slurm site sets beside `sreport job
-- SizesByAccount Partitions=...` and `sreport cluster Utilization`;
-- docs/slurm.md says how the figures relate and where they differ. The held
-- columns by status sum to held_chip_s.
create or replace view queue_daily as
with

waits as (
    select * from queue_waits
),

usage as (
    select
        day,
        cluster,
        queue,
        cluster_queue,
        sum(held_chip_s) as held_chip_s,
        coalesce(sum(held_chip_s) filter (where status = 'FINISHED'), 0) as finished_held_chip_s,
        coalesce(sum(held_chip_s) filter (where status = 'FAILED'), 0) as failed_held_chip_s,
        coalesce(sum(held_chip_s) filter (where status = 'CANCELLED'), 0) as cancelled_held_chip_s,
        coalesce(sum(held_chip_s) filter (where status in ('RUNNING', 'PENDING')), 0) as not_ended_held_chip_s,
        sum(queued_chip_s) as queued_chip_s
    from job_window_enriched
    group by all
),

final as (
    select
        day,
        cluster,
        queue,
        cluster_queue,
        coalesce(waits.submitted, 0) as submitted,
        coalesce(waits.started, 0) as started,
        waits.mean_wait_s,
        waits.p50_wait_s,
        waits.p90_wait_s,
        coalesce(waits.waiting, 0) as waiting,
        coalesce(waits.ended_unstarted, 0) as ended_unstarted,
        coalesce(usage.held_chip_s, 0) as held_chip_s,
        coalesce(usage.finished_held_chip_s, 0) as finished_held_chip_s,
        coalesce(usage.failed_held_chip_s, 0) as failed_held_chip_s,
        coalesce(usage.cancelled_held_chip_s, 0) as cancelled_held_chip_s,
        coalesce(usage.not_ended_held_chip_s, 0) as not_ended_held_chip_s,
        coalesce(usage.queued_chip_s, 0) as queued_chip_s
    from usage
    full outer join waits using (day, cluster, queue, cluster_queue)
)

select * from final
