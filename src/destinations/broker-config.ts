/**
 * The broker destinations' checks that need nothing but the config, apart from their clients
 * (@nats-io, amqplib), so that loading a config does not load those.
 */
import { capturePattern, hasPlaceholder } from './util.js';

/**
 * What is wrong with a subject template and stream name, known from the config alone (parseConfig
 * reports it with the config's path, so check-config does and serve never starts with it).
 */
export function natsConfigProblem(subject: string, stream: string | undefined): { key: 'subject' | 'stream'; message: string } | undefined {
  const literal = subject.replace(/\{(provider|type|endpoint)\}/g, 'x');
  if (!/^[A-Za-z0-9_.$-]+$/.test(literal) || literal.split('.').some((t) => t === '')) {
    return { key: 'subject', message: 'must be "."-separated tokens of A-Z a-z 0-9 _ - $ and placeholders (no wildcards, spaces or empty tokens)' };
  }
  if (stream !== undefined) {
    if (!/^[A-Za-z0-9_-]{1,255}$/.test(stream)) return { key: 'stream', message: 'a stream name is A-Z a-z 0-9 _ -' };
    if (capturePattern(subject, '>') === null) {
      return { key: 'subject', message: 'with "stream" set, the subject must start with a literal token (the stream captures "<prefix>.>")' };
    }
  }
  return undefined;
}

/**
 * What is wrong with an exchange, routing key and queue together, known from the config alone
 * (parseConfig reports it with the config's path, so check-config does and serve never starts with it).
 */
export function rabbitMqConfigProblem(exchange: string, routingKey: string, queue: string | undefined): { key: 'exchange' | 'routingKey' | 'queue'; message: string } | undefined {
  // AMQP's short strings: amqplib refuses a longer exchange on every publish (each delivery a
  // reconnect and a retry, for good), and a routing key whose fixed part alone is longer parks
  // every event; neither can ever work.
  if (Buffer.byteLength(exchange) > 255) return { key: 'exchange', message: 'an exchange name is at most 255 bytes' };
  if (Buffer.byteLength(routingKey.replace(/\{(provider|type|endpoint)\}/g, '')) > 255) {
    return { key: 'routingKey', message: 'a routing key is at most 255 bytes, and this one is longer before its placeholders are filled in' };
  }
  // The broker refuses both on every declare (403 ACCESS_REFUSED; a frame error): each delivery
  // would fail the same way for good.
  if (queue !== undefined && queue.startsWith('amq.')) return { key: 'queue', message: 'queue names starting with "amq." are reserved by RabbitMQ' };
  if (queue !== undefined && Buffer.byteLength(queue) > 255) return { key: 'queue', message: 'a queue name is at most 255 bytes' };
  if (queue !== undefined && exchange === '' && (hasPlaceholder(routingKey) || routingKey !== queue)) {
    return { key: 'routingKey', message: `on the default exchange ("") the routing key is the queue name: set routingKey to "${queue}" or name an exchange` };
  }
  return undefined;
}
