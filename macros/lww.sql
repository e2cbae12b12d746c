{#- docs/protocol.md §4 clock order, the same as lakesync.merge: (hlc, client_id) as a tuple. -#}
{% macro lakesync_beats(a_hlc, a_client, b_hlc, b_client) -%}
    ({{ a_hlc }} > {{ b_hlc }} or ({{ a_hlc }} = {{ b_hlc }} and {{ a_client }} > {{ b_client }}))
{%- endmacro %}


{#- A cell write beats another: by clock, then (same clock, a misbehaving client) by canonical
    value text, exactly like lakesync.merge._wins, so every replica picks the same winner. -#}
{% macro lakesync_cell_beats(a, b) -%}
    ({{ lakesync_beats(a ~ '.hlc', a ~ '.client_id', b ~ '.hlc', b ~ '.client_id') }}
     or ({{ a }}.hlc = {{ b }}.hlc and {{ a }}.client_id = {{ b }}.client_id
         and {{ a }}.value_json > {{ b }}.value_json))
{%- endmacro %}


{#- One winning write per cell among the rows of `relation` (columns of stg_lakesync__cells). -#}
{% macro lakesync_cell_winners(relation) %}
    select gateway_id, table_name, row_id, column_name, value_json, hlc, client_id, ingest_hlc
    from (
        select
            *,
            row_number() over (
                partition by gateway_id, table_name, row_id, column_name
                order by hlc desc, client_id desc, value_json desc
            ) as lww_rank
        from {{ relation }}
    ) ranked
    where lww_rank = 1
{% endmacro %}


{#- Row-level clocks from delta-shaped rows (op, hlc, client_id, ingest_hlc): the greatest write
    clock, the greatest DELETE clock (tombstone) and whether the row is live (a write beats the
    tombstone; a DELETE wins an exact tie). -#}
{% macro lakesync_row_clocks(relation) %}
    select
        gateway_id,
        table_name,
        row_id,
        write_clock.hlc as write_hlc,
        write_clock.client_id as write_client_id,
        delete_clock.hlc as delete_hlc,
        delete_clock.client_id as delete_client_id,
        write_clock is not null and (
            delete_clock is null
            or {{ lakesync_beats('write_clock.hlc', 'write_clock.client_id',
                                 'delete_clock.hlc', 'delete_clock.client_id') }}
        ) as is_live,
        last_ingest_hlc
    from (
        select
            gateway_id,
            table_name,
            row_id,
            max(case when op <> 'DELETE' then named_struct('hlc', hlc, 'client_id', client_id) end)
                as write_clock,
            max(case when op = 'DELETE' then named_struct('hlc', hlc, 'client_id', client_id) end)
                as delete_clock,
            max(ingest_hlc) as last_ingest_hlc
        from {{ relation }}
        group by gateway_id, table_name, row_id
    ) clocks
{% endmacro %}
