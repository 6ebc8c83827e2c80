// The kafkajs consumer driver: `node kafkajs_driver.js --bootstrap HOST:PORT --group G --topic T
// [...]`, with NODE_PATH naming the node_modules that hold kafkajs (huddle.chaos.kafka_workers.launch
// sets it; `make kafkajs` installs the pinned kafkajs). Same flags and JSON lines as the Python
// drivers (see huddle/chaos/kafka_workers/__init__.py). kafkajs is eager only, with its round-robin
// assignor, and has no static membership; it does not tell the generation on joining.
// TLS (--tls-ca FILE) and SASL (--sasl-mechanism, --sasl-username, --sasl-password-file: the
// password is the file's first line) as the Python drivers name them.
'use strict'

const fs = require('fs')
const { Kafka, logLevel, PartitionAssigners } = require('kafkajs')

const SASL_MECHANISMS = ['SCRAM-SHA-256', 'SCRAM-SHA-512', 'PLAIN']

const CLIENT = 'kafkajs'
const STRATEGIES = ['roundrobin']

function fail (message) {
  process.stderr.write(`kafkajs driver: error: ${message}\n`)
  process.exit(2)
}

function parseArgs (argv) {
  const o = {
    strategy: 'roundrobin',
    sessionMs: 6000,
    heartbeatMs: 1000,
    rebalanceMs: 10000,
    instanceId: null,
    commit: true,
    clientId: CLIENT,
    maxSeconds: 600,
    tlsCa: null,
    saslMechanism: null,
    saslUsername: null,
    saslPasswordFile: null
  }
  const valued = {
    '--bootstrap': 'bootstrap',
    '--group': 'group',
    '--topic': 'topic',
    '--strategy': 'strategy',
    '--session-ms': 'sessionMs',
    '--heartbeat-ms': 'heartbeatMs',
    '--rebalance-ms': 'rebalanceMs',
    '--instance-id': 'instanceId',
    '--client-id': 'clientId',
    '--max-seconds': 'maxSeconds',
    '--tls-ca': 'tlsCa',
    '--sasl-mechanism': 'saslMechanism',
    '--sasl-username': 'saslUsername',
    '--sasl-password-file': 'saslPasswordFile'
  }
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]
    if (flag === '--commit') o.commit = true
    else if (flag === '--no-commit') o.commit = false
    else if (flag in valued) {
      if (i + 1 >= argv.length) fail(`${flag} needs a value`)
      o[valued[flag]] = argv[++i]
    } else fail(`unknown argument ${flag}`)
  }
  for (const name of ['bootstrap', 'group', 'topic']) {
    if (!o[name]) fail(`--${name} is required`)
  }
  for (const name of ['sessionMs', 'heartbeatMs', 'rebalanceMs', 'maxSeconds']) {
    o[name] = Number(o[name])
    if (!(o[name] > 0)) fail(`${name} must be a positive number`)
  }
  if (!STRATEGIES.includes(o.strategy)) fail(`kafkajs has no ${o.strategy} strategy (only roundrobin)`)
  if (o.instanceId !== null) fail('kafkajs has no static membership (group.instance.id)')
  if (o.heartbeatMs >= o.sessionMs) fail('--heartbeat-ms must be below --session-ms')
  const sasl = [o.saslMechanism, o.saslUsername, o.saslPasswordFile]
  if (sasl.some((v) => v !== null) && sasl.includes(null)) {
    fail('SASL needs --sasl-mechanism, --sasl-username and --sasl-password-file')
  }
  if (o.saslMechanism !== null && !SASL_MECHANISMS.includes(o.saslMechanism)) {
    fail(`--sasl-mechanism must be one of ${SASL_MECHANISMS.join(', ')}`)
  }
  return o
}

// kafkajs's ssl and sasl settings for the options (undefined: plaintext, no login)
function security (o) {
  const settings = {}
  if (o.tlsCa !== null) settings.ssl = { ca: [fs.readFileSync(o.tlsCa, 'utf8')] }
  if (o.saslMechanism !== null) {
    const password = fs.readFileSync(o.saslPasswordFile, 'utf8').split(/\r?\n/)[0]
    settings.sasl = { mechanism: o.saslMechanism.toLowerCase(), username: o.saslUsername, password }
  }
  return settings
}

function emit (event, fields) {
  const line = {
    event,
    client: CLIENT,
    pid: process.pid,
    mono: Number(process.hrtime.bigint()) / 1e9, // CLOCK_MONOTONIC, as Python's time.monotonic
    ts: Date.now() / 1000,
    ...fields
  }
  process.stdout.write(JSON.stringify(line) + '\n')
}

const key = (t, p) => `${t}\u0000${p}`
const pairs = (set) => [...set].map((k) => { const [t, p] = k.split('\u0000'); return [t, Number(p)] })
  .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]))

async function main () {
  const o = parseArgs(process.argv.slice(2))
  const owned = new Set()
  const read = new Set()

  const kafka = new Kafka({
    clientId: o.clientId,
    brokers: o.bootstrap.split(','),
    logLevel: logLevel.ERROR,
    ...security(o)
  })
  const consumer = kafka.consumer({
    groupId: o.group,
    sessionTimeout: o.sessionMs,
    heartbeatInterval: o.heartbeatMs,
    rebalanceTimeout: o.rebalanceMs,
    partitionAssigners: [PartitionAssigners.roundRobin]
  })

  const revokeAll = () => {
    if (owned.size === 0) return
    const taken = new Set(owned)
    owned.clear()
    emit('revoked', { partitions: pairs(taken), owned: [] })
  }
  const { GROUP_JOIN, REBALANCING, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(REBALANCING, () => revokeAll())
  consumer.on(GROUP_JOIN, ({ payload }) => {
    emit('joined', { member_id: payload.memberId, generation: null, leader: payload.isLeader })
    revokeAll()
    const added = new Set()
    for (const [topic, partitions] of Object.entries(payload.memberAssignment || {})) {
      for (const p of partitions) added.add(key(topic, p))
    }
    for (const k of added) { owned.add(k); read.delete(k) }
    emit('assigned', { partitions: pairs(added), owned: pairs(owned) })
  })
  consumer.on(COMMIT_OFFSETS, ({ payload }) => {
    const offsets = []
    for (const { topic, partitions } of payload.topics) {
      for (const { partition, offset } of partitions) offsets.push([topic, Number(partition), Number(offset)])
    }
    if (offsets.length) emit('committed', { offsets })
  })
  consumer.on(CRASH, ({ payload }) => emit('error', { message: String(payload.error) }))

  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    try {
      await consumer.disconnect()
    } catch (err) {
      emit('error', { message: String(err) })
    }
    revokeAll()
    emit('left', { owned: pairs(owned) })
    process.exit(0)
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  setTimeout(stop, o.maxSeconds * 1000).unref()

  emit('started', { strategy: o.strategy, instance_id: null })
  await consumer.connect()
  await consumer.subscribe({ topics: [o.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: o.commit,
    eachMessage: async ({ topic, partition, message }) => {
      const k = key(topic, partition)
      if (!read.has(k)) {
        read.add(k)
        emit('consumed', { topic, partition, offset: Number(message.offset) })
      }
    }
  })
}

main().catch((err) => {
  emit('error', { message: String(err) })
  process.exit(1)
})
