{#- Generic data tests (the project has no package dependencies to install offline). -#}

{% test lakesync_unique_combination(model, columns) %}
    select {{ columns | join(', ') }}, count(*) as occurrences
    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1
{% endtest %}


{#- Rows of `model` where any of `columns` is null: one scan for every key column of a model
    (a not_null test per column would scan it once per column). -#}
{% test lakesync_not_null(model, columns) %}
    select {{ columns | join(', ') }}
    from {{ model }}
    where {% for c in columns %}{{ c }} is null{% if not loop.last %} or {% endif %}{% endfor %}
{% endtest %}


{#- The landing position that every successful `lakesync pipeline run` before this one has
    checked: the invariant tests below read only landing rows past it, so a scheduled run checks
    its increment, not the whole history (which grows for as long as the lake lives). It is what
    the last successful run recorded as complete (`lakesync.covered` on int_rows_merged, written
    by lakesync/lakehouse/runner.py after dbt succeeded, so a run whose tests failed is checked again):
    the least of its position and the positions of gateways held back then. -1 (everything) on a
    full refresh, before the first successful run, and for a plain `dbt build` of a fresh lake.
    `relation`: a model in the schema of int_rows_merged. -#}
{% macro lakesync_checked_since(relation) -%}
    {%- set since = [-1] -%}
    {%- if execute and not flags.FULL_REFRESH -%}
        {%- set rows = adapter.get_relation(
            database=relation.database, schema=relation.schema, identifier='int_rows_merged') -%}
        {%- if rows is not none -%}
            {%- for prop in run_query('show tblproperties ' ~ rows) -%}
                {%- if prop[0] == 'lakesync.covered' -%}
                    {%- set covered = fromjson(prop[1]) -%}
                    {%- do since.append(([covered['position']] + (covered['held'].values() | list)) | min) -%}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
    {%- endif -%}
    {{- since[-1] | int -}}
{%- endmacro %}


{#- LWW invariant of int_cells_merged: every landed cell has a stored cell, and no landed write
    beats the stored winner. A winner only ever gives way to a write that beats it, so cells
    checked by an earlier run stay checked: only the landing past lakesync_checked_since is read. -#}
{% test lakesync_cells_are_lww_winners(model) %}
    select s.gateway_id, s.table_name, s.row_id, s.column_name, s.hlc, s.client_id
    from {{ ref('stg_lakesync__cells') }} s
    left join {{ model }} m
        on s.gateway_id = m.gateway_id and s.table_name = m.table_name
        and s.row_id = m.row_id and s.column_name = m.column_name
    where s.ingest_hlc > {{ lakesync_checked_since(model) }}
        and (m.row_id is null or {{ lakesync_cell_beats('s', 'm') }})
{% endtest %}


{#- Row invariant of int_rows_merged: stored clocks are the maxima over landed deltas (clocks only
    grow, so as above only the landing past lakesync_checked_since is read). -#}
{% test lakesync_row_clocks_are_maxima(model) %}
    select s.gateway_id, s.table_name, s.row_id, s.op, s.hlc, s.client_id
    from {{ ref('stg_lakesync__deltas') }} s
    left join {{ model }} m
        on s.gateway_id = m.gateway_id and s.table_name = m.table_name and s.row_id = m.row_id
    where s.ingest_hlc > {{ lakesync_checked_since(model) }} and (m.row_id is null
        or (s.op <> 'DELETE' and (m.write_hlc is null
            or {{ lakesync_beats('s.hlc', 's.client_id', 'm.write_hlc', 'm.write_client_id') }}))
        or (s.op = 'DELETE' and (m.delete_hlc is null
            or {{ lakesync_beats('s.hlc', 's.client_id', 'm.delete_hlc', 'm.delete_client_id') }})))
{% endtest %}


{#- A current-state table holds exactly the live rows of its table in int_rows_merged. -#}
{% test lakesync_live_rows_match(model, table_name) %}
    select
        coalesce(m.gateway_id, r.gateway_id) as gateway_id,
        coalesce(m.row_id, r.row_id) as row_id,
        m.row_id is null as missing_from_model
    from {{ model }} m
    full outer join (
        select gateway_id, row_id
        from {{ ref('int_rows_merged') }}
        where table_name = '{{ table_name }}' and is_live
    ) r
        on m.gateway_id = r.gateway_id and m.row_id = r.row_id
    where m.row_id is null or r.row_id is null
{% endtest %}
