-- Goodput per workload (demand base); see goodput_by_segment.
create or replace view goodput_by_workload as
select segment as workload, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'workload'
