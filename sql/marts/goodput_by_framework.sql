-- Goodput per framework (demand base); see goodput_by_segment.
create or replace view goodput_by_framework as
select segment as framework, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'framework'
