-- The demo's join (orders_with_customers.yaml): each Avro order with its customer's name, tier and country, from
-- the row the declared join put in `customers`; and how many customers share its tier, from the table's view.
SELECT /*+ BROADCAST(t) */ i.topic, i.partition, i.offset, i.key,
       named_struct('order_id', i.data.order_id, 'amount', i.data.amount, 'customer', i.data.customer,
                    'name', i.customers.data.name, 'tier', i.customers.data.tier,
                    'country', i.customers.data.country, 'customers_in_tier', t.n) AS data
FROM input i LEFT JOIN (SELECT data.tier AS tier, count(*) AS n FROM customers GROUP BY data.tier) t
  ON i.customers.data.tier <=> t.tier
