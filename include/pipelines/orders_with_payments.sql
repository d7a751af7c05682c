-- The demo's interval join (orders_with_payments.yaml): the join key and the event time of each order and each
-- payment, read from their JSON; a record without them (a malformed order) is a dead letter.
SELECT *, CASE WHEN order_id IS NULL OR at IS NULL THEN 'not a JSON record with order_id and created_at' END AS error
FROM (SELECT *, get_json_object(CAST(value AS STRING), '$.order_id') AS order_id,
             CAST(get_json_object(CAST(value AS STRING), '$.created_at') AS BIGINT) AS at
      FROM input)
