-- One row per (gateway, table, row) with its greatest write clock, greatest DELETE clock and
-- liveness (docs/protocol.md §4: delete wins an exact tie). An increment joins the new deltas with the stored
-- clocks of the rows they touch (as pseudo-deltas), so the result is a pure join of clocks.
{{
    config(
        unique_key=['gateway_id', 'table_name', 'row_id'],
    )
}}

with new_deltas as (
    select gateway_id, table_name, row_id, op, hlc, client_id, ingest_hlc
    from {{ ref('stg_lakesync__deltas') }}
    {%- if is_incremental() %}
    where ingest_hlc > {{ lakesync_stored_position('last_ingest_hlc') }}
    {%- endif %}
),

{% if is_incremental() %}
touched as (
    select distinct gateway_id, table_name, row_id from new_deltas
),

stored as (
    select s.*
    from {{ this }} s
    inner join touched t
        on s.gateway_id = t.gateway_id and s.table_name = t.table_name and s.row_id = t.row_id
),

all_deltas as (
    select * from new_deltas
    union all
    select gateway_id, table_name, row_id, 'UPDATE' as op, write_hlc as hlc,
        write_client_id as client_id, last_ingest_hlc as ingest_hlc
    from stored
    where write_hlc is not null
    union all
    select gateway_id, table_name, row_id, 'DELETE' as op, delete_hlc as hlc,
        delete_client_id as client_id, last_ingest_hlc as ingest_hlc
    from stored
    where delete_hlc is not null
),
{% else %}
all_deltas as (
    select * from new_deltas
),
{% endif %}

final as (
    {{ lakesync_row_clocks('all_deltas') }}
)

select * from final
