-- The demo's SQL pipeline (orders_by_size.yaml): each Avro order as JSON, with its size band; a negative
-- amount is a dead letter. sink.routes then sends each order to its band's topic, by the `data` this returns.
SELECT topic, partition, offset, key,
       named_struct('order_id', data.order_id, 'customer', data.customer, 'amount', data.amount,
                    'currency', data.currency,
                    'size', CASE WHEN data.amount >= 200 THEN 'large' WHEN data.amount >= 50 THEN 'medium'
                                 ELSE 'small' END) AS data,
       CASE WHEN data.amount < 0 THEN 'negative amount' END AS error
FROM input
