{#- The landing position this incremental model's stored rows are complete through (the max of
    `column` in {{ this }}), as a literal: an increment's `ingest_hlc > position` filter then reaches
    the Iceberg scan, which skips every landing file whose max ingest_hlc is not past it (a scalar
    subquery is not pushed into the scan, so the whole landing table was read on every run).
    In dbt unit tests `this` is the fixture CTE, not a table: they get the same bound as a subquery. -#}
{% macro lakesync_stored_position(column) -%}
    {%- set sql = 'select coalesce(max(' ~ column ~ '), -1) from ' ~ this -%}
    {%- if execute and this is not string -%}
        {{ run_query(sql).columns[0].values()[0] | int }}
    {%- else -%}
        ({{ sql }})
    {%- endif -%}
{%- endmacro %}
