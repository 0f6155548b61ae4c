-- Goodput per accelerator (demand base); see goodput_by_segment.
create or replace view goodput_by_accelerator as
select segment as accelerator, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'accelerator'
