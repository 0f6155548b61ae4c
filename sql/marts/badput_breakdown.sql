-- Where the chip-time went, over the whole output: badput_daily's rows
-- summed. Job categories share the demand base (they sum to the jobs'
-- lifetime chip-time, so their shares sum to 1); idle capacity is capacity no
-- job held, a share of chips online.
create or replace view badput_breakdown as
with

days as (
    select * from badput_daily
),

final as (
    select
        category,
        base,
        sum(chip_s) / 3600 as chip_hours,
        ratio(sum(chip_s), sum(base_chip_s)) as share
    from days
    group by category, base
)

select * from final
