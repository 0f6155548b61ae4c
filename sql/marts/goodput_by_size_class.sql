-- Goodput per size_class (demand base); see goodput_by_segment.
create or replace view goodput_by_size_class as
select segment as size_class, * exclude (dimension, segment)
from goodput_by_segment
where dimension = 'size_class'
