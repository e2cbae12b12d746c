-- One row per written cell: the landing deltas exploded by column (DELETEs carry none).
with source as (
    select * from {{ source('lakesync', 'landing') }}
    where op <> 'DELETE'
),

exploded as (
    select
        gateway_id,
        ingest_hlc,
        delta_id,
        table_name,
        row_id,
        client_id,
        hlc,
        explode(cells) as cell
    from source
),

final as (
    select
        gateway_id,
        ingest_hlc,
        delta_id,
        table_name,
        row_id,
        client_id,
        hlc,
        cell.column as column_name,
        cell.value_json
    from exploded
)

select * from final
