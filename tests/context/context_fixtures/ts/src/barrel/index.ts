export * from './utils/common'
export { Thing as Widget } from './utils/thing'
export * from './loop'
