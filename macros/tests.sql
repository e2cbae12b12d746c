{#- Generic data tests (the project has no package dependencies to install offline). -#}

{% test lakesync_unique_combination(model, columns) %}
    select {{ columns | join(', ') }}, count(*) as occurrences
    from {{ model }}
    group by {{ columns | join(', ') }}
    having count(*) > 1
{% endtest %}


{#- LWW invariant of int_cells_merged: every landed cell has a stored cell, and no landed write
    beats the stored winner. -#}
{% test lakesync_cells_are_lww_winners(model) %}
    select s.gateway_id, s.table_name, s.row_id, s.column_name, s.hlc, s.client_id
    from {{ ref('stg_lakesync__cells') }} s
    left join {{ model }} m
        on s.gateway_id = m.gateway_id and s.table_name = m.table_name
        and s.row_id = m.row_id and s.column_name = m.column_name
    where m.row_id is null or {{ lakesync_cell_beats('s', 'm') }}
{% endtest %}


{#- Row invariant of int_rows_merged: stored clocks are the maxima over landed deltas. -#}
{% test lakesync_row_clocks_are_maxima(model) %}
    select s.gateway_id, s.table_name, s.row_id, s.op, s.hlc, s.client_id
    from {{ ref('stg_lakesync__deltas') }} s
    left join {{ model }} m
        on s.gateway_id = m.gateway_id and s.table_name = m.table_name and s.row_id = m.row_id
    where m.row_id is null
        or (s.op <> 'DELETE' and (m.write_hlc is null
            or {{ lakesync_beats('s.hlc', 's.client_id', 'm.write_hlc', 'm.write_client_id') }}))
        or (s.op = 'DELETE' and (m.delete_hlc is null
            or {{ lakesync_beats('s.hlc', 's.client_id', 'm.delete_hlc', 'm.delete_client_id') }}))
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
