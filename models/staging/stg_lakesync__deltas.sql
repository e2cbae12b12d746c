with source as (
    select * from {{ source('lakesync', 'landing') }}
),

final as (
    select
        gateway_id,
        ingest_hlc,
        delta_id,
        op,
        table_name,
        row_id,
        client_id,
        hlc
    from source
)

select * from final
